// EMQ web console: a topic's event subscriptions (issue 28). Loaded after app.js and uses its
// helpers (call, topicPath, state, el, $, when, fail, enc). Lists a topic's subscriptions;
// creates one (its signing secret is shown once, here), enables or disables, rotates the
// secret, deletes; publishes a test event and shows each subscription's delivery state.
"use strict";

const subs = { ref: null };

function subsPath(rest = "") {
  return `${topicPath(subs.ref.tenant, subs.ref.topic)}/subscriptions${rest}`;
}

async function loadSubs() {
  if (!subs.ref) return;
  const body = await call("GET", subsPath());
  $("#subs-count").textContent = `${body.subscriptions.length} of at most ${body.limit}`;
  $("#subs tbody").replaceChildren(...body.subscriptions.map(subRow));
  for (const id of ["#sub-create", "#event-publish"]) $(id).disabled = false;
}

function subRow(s) {
  const toggle = el("button", { class: "sub-toggle",
    onclick: () => changeSub(s.id, { enabled: !s.enabled }) }, s.enabled ? "Disable" : "Enable");
  const rotate = el("button", { class: "sub-rotate", onclick: () => rotateSub(s.id) },
    "Rotate secret");
  const remove = el("button", { class: "sub-delete", onclick: () => deleteSub(s.id) }, "Delete");
  const headers = Object.entries(s.headers).map(([k, v]) => `${k}: ${v}`).join("; ");
  return el("tr", { data: { id: s.id } }, el("td", {}, s.id), el("td", {}, s.url),
    el("td", { class: "sub-types" }, s.event_types.join(", ")), el("td", {}, headers),
    el("td", { class: "sub-enabled" }, s.enabled ? "yes" : "no"), el("td", {}, when(s.created_at)),
    el("td", {}, toggle, " ", rotate, " ", remove));
}

function showSecret(s, what) {
  $("#sub-secret").hidden = false;
  $("#sub-secret-text").textContent = s.secret;
  $("#sub-secret-what").textContent = `${what} ${s.id}`;
}

async function act(work) {
  showError("");
  try {
    await work();
    await loadSubs();
  } catch (e) {
    fail(e);
  }
}

function changeSub(id, changes) {
  return act(() => call("PATCH", subsPath(`/${enc(id)}`), changes));
}

function rotateSub(id) {
  return act(async () => showSecret(await call("POST", subsPath(`/${enc(id)}/rotate-secret`)),
    "new secret of"));
}

function deleteSub(id) {
  return act(() => call("DELETE", subsPath(`/${enc(id)}`)));
}

function createSub(form) {
  const types = form.elements.types.value.split(",").map((t) => t.trim()).filter(Boolean);
  const body = { url: form.elements.url.value.trim(), event_types: types };
  const header = form.elements.header.value.trim();
  if (header) {
    const at = header.indexOf(":");
    body.headers = { [header.slice(0, at).trim()]: header.slice(at + 1).trim() };
  }
  return act(async () => {
    showSecret(await call("POST", subsPath(), body), "secret of");
    form.reset();
  });
}

async function publishEvent(form) {
  showError("");
  let payload = null;
  const raw = form.elements.payload.value.trim();
  try {
    if (raw) payload = JSON.parse(raw);
  } catch (e) {
    showError(`payload is not JSON: ${e.message}`);
    return;
  }
  try {
    const path = `${topicPath(subs.ref.tenant, subs.ref.topic)}/events`;
    const r = await call("POST", path, { type: form.elements.type.value.trim(), payload });
    $("#event-status").textContent = `event ${r.event_id}: ${r.deliveries} deliveries`;
    await showEvent(r.event_id);
  } catch (e) {
    fail(e);
  }
}

async function showEvent(id) {
  const ev = await call("GET", `${topicPath(subs.ref.tenant, subs.ref.topic)}/events/${enc(id)}`);
  $("#event-deliveries").hidden = false;
  $("#event-deliveries tbody").replaceChildren(...ev.deliveries.map((d) => el("tr", {},
    el("td", {}, d.subscription), el("td", {}, d.job_id),
    el("td", { class: "delivery-state" }, d.state))));
}

$("#subs-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = ev.target.elements;
  subs.ref = { tenant: f.tenant.value.trim(), topic: f.topic.value.trim() };
  $("#sub-secret").hidden = true;
  $("#event-deliveries").hidden = true;
  $("#event-status").textContent = "";
  showError("");
  loadSubs().catch(fail);
});
$("#sub-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  createSub(ev.target);
});
$("#event-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  publishEvent(ev.target);
});
$("#nav button[data-view=subscriptions]").addEventListener("click", () => {
  const tenant = $("#subs-form").elements.tenant;
  if (state.tenant && !tenant.value) tenant.value = state.tenant;
});
