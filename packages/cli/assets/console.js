// meshctl console: keeps the page live. The page is complete without this script (the server
// renders it whole); this only opens the live channel (Server-Sent Events) once the page is
// shown, and puts each new rendering of <main> in place. No library, no build step.
"use strict";
(() => {
  const body = document.body;
  const main = document.getElementById("view");
  const live = document.getElementById("live");
  const token = new URLSearchParams(location.search).get("token") || "";
  const show = (state, text) => {
    live.dataset.live = state;
    live.textContent = text;
  };
  const open = () => {
    const q = new URLSearchParams({ token, path: body.dataset.path || "/", since: body.dataset.version || "-1" });
    const events = new EventSource(`/events?${q}`);
    events.onopen = () => show("on", "live");
    events.addEventListener("view", (e) => {
      const v = JSON.parse(e.data);
      main.innerHTML = v.html;
      document.title = v.title;
      body.dataset.version = String(v.version);
      show("on", "live");
    });
    events.addEventListener("problem", (e) => show("problem", JSON.parse(e.data).message));
    // EventSource reconnects by itself; say so meanwhile.
    events.onerror = () =>
      show("reconnecting", events.readyState === EventSource.CLOSED ? "not live: the console stopped; start it again and open its new URL" : "reconnecting…");
  };
  show("connecting", "connecting…");
  open();
})();
