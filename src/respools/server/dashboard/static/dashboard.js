// respools dashboard: keeps the server-rendered sections live. No framework, no build step.
//
// - An EventSource on /ui/stream says "something changed"; the page then fetches /ui/sections (HTML
//   rendered by the server) and swaps the sections whose markup changed.
// - Countdowns to preemption deadlines and ages tick four times a second, against the server's clock.
// - Admin buttons (data-post) POST with the page's CSRF token, after a confirmation.
"use strict";

(() => {
  const csrf = document.querySelector('meta[name="csrf-token"]')?.content ?? "";
  const status = document.getElementById("live-status");
  const flash = document.getElementById("flash");
  const TICK_MS = 250; // countdowns and ages stay within a quarter second of the truth
  const rendered = new Map(); // section id -> last HTML received
  let clockOffsetMs = 0; // server clock minus ours
  let fetching = false;
  let again = false;
  let source = null;
  let retryTimer = null;

  // ---- time ---------------------------------------------------------------------------------------

  const now = () => Date.now() + clockOffsetMs;

  function duration(seconds) {
    const s = Math.max(0, Math.floor(seconds));
    const pad = (n) => String(n).padStart(2, "0");
    if (s < 60) return `${s} s`;
    if (s < 3600) return `${Math.floor(s / 60)} m ${pad(s % 60)} s`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${pad(Math.floor((s % 3600) / 60))} m`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }

  function tick() {
    const t = now();
    for (const el of document.querySelectorAll(".countdown[data-deadline]")) {
      const left = (Date.parse(el.dataset.deadline) - t) / 1000;
      el.textContent = left > 0 ? `${duration(Math.ceil(left))} left` : "deadline passed";
      el.classList.toggle("overdue", left <= 0);
      el.classList.toggle("urgent", left > 0 && left <= 10);
    }
    for (const el of document.querySelectorAll("time.age[datetime]")) {
      el.textContent = duration((t - Date.parse(el.getAttribute("datetime"))) / 1000);
    }
  }

  function localizeClocks(root) {
    for (const el of root.querySelectorAll("time.clock[datetime]")) {
      const when = new Date(el.getAttribute("datetime"));
      if (!Number.isNaN(when.getTime())) el.textContent = when.toLocaleTimeString([], { hour12: false });
    }
  }

  // ---- live sections ------------------------------------------------------------------------------

  function setStatus(text, state) {
    if (!status) return;
    status.textContent = text;
    status.className = `live-status ${state}`;
  }

  async function refresh() {
    if (fetching) {
      again = true; // coalesce: one more fetch once this one is done
      return;
    }
    fetching = true;
    try {
      const sent = Date.now();
      const response = await fetch("/ui/sections", {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
        cache: "no-store",
      });
      if (response.status === 401) {
        window.location.assign("/"); // the session ended: show the sign-in prompt
        return;
      }
      if (!response.ok) throw new Error(`HTTP ${response.status}`);
      const body = await response.json();
      // Correct countdowns for a skewed clock, but not for the round trip: the server's reading lies
      // somewhere within it, so a difference smaller than half the trip (plus slack) is no skew.
      const received = Date.now();
      const skew = body.now - (sent + received) / 2;
      clockOffsetMs = Math.abs(skew) <= (received - sent) / 2 + 250 ? 0 : skew;
      for (const [id, html] of Object.entries(body.sections)) {
        const el = document.getElementById(id);
        if (!el || rendered.get(id) === html) continue;
        rendered.set(id, html);
        el.innerHTML = html;
        localizeClocks(el);
      }
      document.getElementById("main")?.setAttribute("data-version", String(body.version));
      if (source && source.readyState === EventSource.OPEN) setStatus("live", "live");
      tick();
    } catch (error) {
      setStatus("update failed, retrying…", "error");
      window.setTimeout(refresh, 2000);
    } finally {
      fetching = false;
      if (again) {
        again = false;
        refresh();
      }
    }
  }

  function connect() {
    if (retryTimer !== null) {
      window.clearTimeout(retryTimer);
      retryTimer = null;
    }
    source = new EventSource("/ui/stream");
    source.addEventListener("hello", () => {
      setStatus("live", "live");
      refresh(); // catch up on whatever happened while (re)connecting
    });
    source.addEventListener("change", refresh);
    source.addEventListener("signed-out", () => window.location.assign("/"));
    source.onerror = () => {
      setStatus("reconnecting…", "connecting");
      if (source.readyState === EventSource.CLOSED) {
        // refused (e.g. 401) or the server went away for good: check the session, then try again
        refresh();
        retryTimer = window.setTimeout(connect, 3000);
      }
    };
  }

  // ---- admin actions ------------------------------------------------------------------------------

  function say(message, kind) {
    if (!flash) return;
    flash.textContent = message;
    flash.className = `flash ${kind}`;
    flash.hidden = false;
    window.clearTimeout(say.timer);
    say.timer = window.setTimeout(() => {
      flash.hidden = true;
    }, 6000);
  }

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-post]");
    if (!button) return;
    if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
    button.disabled = true;
    try {
      const response = await fetch(button.dataset.post, {
        method: "POST",
        credentials: "same-origin",
        headers: { "X-CSRF-Token": csrf, Accept: "application/json" },
      });
      const body = await response.json().catch(() => ({}));
      if (response.ok) say(button.dataset.done || body.message || "Done.", "ok");
      else say(body.detail || `Refused (HTTP ${response.status}).`, "error");
    } catch (error) {
      say("The server did not answer; try again.", "error");
    } finally {
      button.disabled = false;
      refresh();
    }
  });

  // ---- start --------------------------------------------------------------------------------------

  localizeClocks(document);
  for (const el of document.querySelectorAll(".live[id]")) rendered.set(el.id, null);
  tick();
  window.setInterval(tick, TICK_MS);
  connect();
})();
