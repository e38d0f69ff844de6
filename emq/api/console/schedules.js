// EMQ web console: a topic's schedules (issue 28). Loaded after app.js and uses its helpers
// (call, topicPath, enc, el, $, fail, showError, showView, VIEWS). The list is polled while the view
// is shown: each schedule's next and last tick, its counters, and pause, resume and delete; a
// row's id shows the schedule: its last tick's job and state, and the next five ticks.
"use strict";

const schedules = { ref: null, shown: null };

function tickText(t) {
  return t ? t.local.replace("T", " ") : "-";
}

async function pollSchedules() {
  const ref = schedules.ref;
  if (!ref) return false;
  const base = `${topicPath(ref.tenant, ref.topic)}/schedules`;
  const body = await call("GET", base);
  renderSchedules(body.schedules);
  if (schedules.shown) await showSchedule(schedules.shown);
}

function renderSchedules(rows) {
  $("#schedules tbody").replaceChildren(...rows.map((s) => {
    const act = (label, cls, fn) => el("button", { class: cls, onclick: fn }, label);
    const toggle = s.paused
      ? act("Resume", "schedule-resume", () => changeSchedule(s.id, { paused: false }))
      : act("Pause", "schedule-pause", () => changeSchedule(s.id, { paused: true }));
    const last = s.last_tick ? `${tickText(s.last_tick)} (${s.last_tick.job_id})` : "-";
    return el("tr", { data: { id: s.id } },
      el("td", {}, el("a", { href: "#", class: "schedule-id",
        onclick: (ev) => { ev.preventDefault(); showSchedule(s.id).catch(fail); } }, s.id)),
      el("td", {}, el("code", {}, s.cron)), el("td", {}, s.timezone),
      el("td", { class: "schedule-state" }, s.paused ? "paused" : "active"),
      el("td", { class: "schedule-next" }, tickText(s.next_tick)),
      el("td", { class: "schedule-last" }, last),
      el("td", { class: "num schedule-fired" }, s.fired), el("td", { class: "num" }, s.late),
      el("td", { class: "num" }, s.skipped),
      el("td", {}, toggle, " ", act("Delete", "schedule-delete", () => deleteSchedule(s.id))));
  }));
}

async function showSchedule(id) {
  const ref = schedules.ref;
  const s = await call("GET", `${topicPath(ref.tenant, ref.topic)}/schedules/${enc(id)}`);
  schedules.shown = id;
  $("#schedule-detail").hidden = false;
  $("#schedule-title").textContent = `${s.id}: ${s.cron} (${s.timezone}), catch-up ${s.catch_up}`;
  const last = s.last_tick;
  $("#schedule-last").textContent = last
    ? `last tick ${tickText(last)}: job ${last.job_id}, ${last.job_state || "no longer known"}` +
      (last.lag_s == null ? "" : last.lag_s < 0
        ? `, stored ${(-last.lag_s).toFixed(3)} s ahead of the tick`
        : `, stored ${last.lag_s.toFixed(3)} s after the tick`)
    : "no tick fired yet";
  $("#schedule-next").replaceChildren(...s.next_ticks.map((t) => el("li", {}, tickText(t))));
}

async function changeSchedule(id, body) {
  const ref = schedules.ref;
  try {
    await call("PATCH", `${topicPath(ref.tenant, ref.topic)}/schedules/${enc(id)}`, body);
    await pollSchedules();
  } catch (e) {
    fail(e);
  }
}

async function deleteSchedule(id) {
  const ref = schedules.ref;
  try {
    await call("DELETE", `${topicPath(ref.tenant, ref.topic)}/schedules/${enc(id)}`);
    if (schedules.shown === id) {
      schedules.shown = null;
      $("#schedule-detail").hidden = true;
    }
    await pollSchedules();
  } catch (e) {
    fail(e);
  }
}

$("#schedules-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = ev.target.elements;
  schedules.ref = { tenant: f.tenant.value.trim(), topic: f.topic.value.trim() };
  schedules.shown = null;
  $("#schedule-detail").hidden = true;
  $("#schedule-create").hidden = false;
  showView("schedules");
});

$("#schedule-create").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const f = ev.target.elements;
  const ref = schedules.ref;
  const body = { cron: f.cron.value.trim(), timezone: f.timezone.value.trim() || "UTC",
    catch_up: f.catch_up.value, job: { url: f.url.value.trim() } };
  if (f.id.value.trim()) body.id = f.id.value.trim();
  try {
    const s = await call("POST", `${topicPath(ref.tenant, ref.topic)}/schedules`, body);
    showError("");
    $("#schedule-status").textContent = `schedule ${s.id} created, next ${tickText(s.next_tick)}`;
    await pollSchedules();
  } catch (e) {
    fail(e);
  }
});

VIEWS.schedules = pollSchedules;
