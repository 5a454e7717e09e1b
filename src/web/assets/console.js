// shardcar console: confirmations, live updates and the cron preview. No build step, no library.
"use strict";

// Every action form asks first; the server asks again for a form that was not confirmed here.
document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form.dataset.confirm;
  if (!question) return;
  if (!window.confirm(question)) {
    event.preventDefault();
    return;
  }
  const confirmed = form.querySelector('input[name="confirmed"]');
  if (confirmed) confirmed.value = "yes";
});

// An update is merged into the page, not pasted over it: every node whose place and kind are
// unchanged stays the same node, only its text and attributes brought up to date. A button
// being clicked while an update arrives is still there to receive the click (a replaced one
// would swallow it), and an update equal to what is shown changes nothing.
function replaceLive(live, html) {
  if (live.dataset.last === html) return;
  live.dataset.last = html;
  const fresh = document.createElement("template");
  fresh.innerHTML = html;
  mergeChildren(live, fresh.content);
}

function mergeChildren(target, source) {
  const wanted = Array.from(source.childNodes);
  const present = Array.from(target.childNodes);
  wanted.forEach((node, i) => {
    const old = present[i];
    if (!old) {
      target.appendChild(node);
    } else if (old.nodeType === node.nodeType && old.nodeName === node.nodeName) {
      mergeNode(old, node);
    } else {
      target.replaceChild(node, old);
    }
  });
  present.slice(wanted.length).forEach((old) => old.remove());
}

function mergeNode(old, node) {
  if (old.nodeType !== Node.ELEMENT_NODE) {
    if (old.nodeValue !== node.nodeValue) old.nodeValue = node.nodeValue;
    return;
  }
  for (const { name } of Array.from(old.attributes)) {
    if (!node.hasAttribute(name)) old.removeAttribute(name);
  }
  for (const { name, value } of Array.from(node.attributes)) {
    if (old.getAttribute(name) !== value) old.setAttribute(name, value);
  }
  mergeChildren(old, node);
}

// A job's page: its live part comes by server-sent events.
function followEvents(live) {
  const indicator = document.getElementById("live-indicator");
  const mark = (cls, title) => {
    if (!indicator) return;
    indicator.className = "badge " + cls;
    indicator.title = title;
  };
  const source = new EventSource(live.dataset.liveSse);
  source.addEventListener("open", () => mark("ok", "live: updates as they happen"));
  source.addEventListener("update", (e) => {
    mark("ok", "live: updates as they happen");
    replaceLive(live, e.data);
  });
  source.addEventListener("zk", (e) => {
    const zk = document.getElementById("zk-state");
    if (!zk) return;
    const holder = document.createElement("div");
    holder.innerHTML = e.data;
    const span = holder.firstElementChild;
    if (!span) return;
    zk.className = "badge " + span.className;
    zk.textContent = span.textContent;
  });
  source.addEventListener("removed", () => {
    source.close();
    mark("off", "the job was removed");
    const note = document.createElement("p");
    note.className = "notice";
    note.id = "removed";
    note.textContent = "This job was removed from the namespace.";
    live.replaceChildren(note);
  });
  source.addEventListener("error", () => mark("warn", "reconnecting…"));
}

// The jobs and servers lists: a small poll, paused while the tab is hidden.
function poll(live) {
  const url = live.dataset.livePoll;
  let busy = false;
  setInterval(async () => {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const response = await fetch(url, { credentials: "same-origin" });
      if (response.ok) replaceLive(live, await response.text());
    } catch (_) {
      // The next round tries again.
    } finally {
      busy = false;
    }
  }, 5000);
}

// The configuration form: the next fire times of the cron being typed.
function previewCron(input) {
  const target = document.getElementById(input.dataset.cronPreview);
  const zone = document.getElementById(input.dataset.zoneField);
  if (!target) return;
  let timer = null;
  let asked = 0;
  const ask = () => {
    const n = ++asked;
    const params = new URLSearchParams({ cron: input.value, time_zone: zone ? zone.value : "" });
    fetch("/cron/preview?" + params.toString(), { credentials: "same-origin" })
      .then((r) => (r.ok ? r.text() : Promise.reject(r.status)))
      .then((html) => {
        if (n === asked) target.innerHTML = html;
      })
      .catch(() => {});
  };
  const later = () => {
    clearTimeout(timer);
    timer = setTimeout(ask, 200);
  };
  input.addEventListener("input", later);
  if (zone) zone.addEventListener("input", later);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-live-sse]").forEach(followEvents);
  document.querySelectorAll("[data-live-poll]").forEach(poll);
  document.querySelectorAll("[data-cron-preview]").forEach(previewCron);
});
