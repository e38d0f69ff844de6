// EMQ web console: paced DLQ replays in the DLQ view (issue 16). Loaded after app.js and uses
// its helpers (call, topicPath, poll, state, el, $, when, fail). A replay's row shows a progress
// bar and, while it runs, a cancel button; the list is polled (at most once a second, only
// while the DLQ view is shown) as long as one of the topic's replays is running.
"use strict";

const replays = { polling: false };

function replayRef() {
  return state.dlq.ref;
}

async function loadReplays() {
  const ref = replayRef();
  if (!ref || state.view !== "dlq") return false;
  const body = await call("GET", `${topicPath(ref.tenant, ref.topic)}/dlq/replays?limit=10`);
  renderReplays(body.replays);
  return body.replays.some((r) => r.state === "running");
}

function renderReplays(rows) {
  $("#replays").hidden = rows.length === 0;
  $("#replays tbody").replaceChildren(...rows.map((r) => {
    const done = r.replayed + r.skipped;
    const bar = el("progress", { max: String(Math.max(1, r.total)), value: String(done),
      title: `${done} of ${r.total}` });
    const cancel = r.state === "running"
      ? el("button", { class: "replay-cancel", onclick: () => cancelReplay(r.id) }, "Cancel")
      : "";
    return el("tr", { data: { id: r.id } }, el("td", {}, r.id),
      el("td", { class: "replay-state" }, r.state), el("td", {}, bar),
      el("td", { class: "num replay-done" }, `${r.replayed} of ${r.total}`),
      el("td", { class: "num" }, r.remaining), el("td", { class: "num" }, `${r.rate}/s`),
      el("td", {}, when(r.created_at)), el("td", {}, cancel));
  }));
}

function watchReplays() {
  if (replays.polling) return;
  replays.polling = true;
  poll(loadReplays, state.generation).finally(() => { replays.polling = false; });
}

async function startReplay() {
  const ref = replayRef();
  const raw = $("#replay-rate").value.trim();
  const body = raw ? { rate: Number(raw) } : {};
  try {
    const r = await call("POST", `${topicPath(ref.tenant, ref.topic)}/dlq/replays`, body);
    $("#replay-status").textContent = `replay ${r.id}: ${r.total} letters at ${r.rate}/s`;
    await loadReplays();
    watchReplays();
  } catch (e) {
    fail(e);
  }
}

async function cancelReplay(id) {
  const ref = replayRef();
  try {
    await call("DELETE", `${topicPath(ref.tenant, ref.topic)}/dlq/replays/${enc(id)}`);
    $("#replay-status").textContent = `replay ${id} cancelled`;
    await loadReplays();
  } catch (e) {
    fail(e);
  }
}

$("#dlq-form").addEventListener("submit", () => {
  // app.js's own listener ran first and set state.dlq.ref.
  $("#dlq-replay-paced").disabled = false;
  $("#replay-status").textContent = "";
  loadReplays().then((running) => { if (running) watchReplays(); }).catch(fail);
});
$("#dlq-replay-paced").addEventListener("click", startReplay);
