// memories web: a little script that enhances pages which work without it (served by the app itself, no CDN).
// - Ask: Enter sends the question (Shift+Enter: a new line; never while an input method composes), by fetch, and
//   while the model works Cancel (or Esc) aborts it: the server sees the browser hang up and hangs up on the daemon,
//   which cancels the ask job. The answer's <main> replaces this page's.
// - Status: while a job runs, the live parts (indexes, jobs) are fetched again every two seconds and replaced in
//   place, keeping the keyboard focus (without this script a <noscript> refresh reloads the whole page).
"use strict";

(function () {
  const enhanceAsk = (form) => {
    const question = form.querySelector("textarea[name=question]");
    const submit = form.querySelector("button[type=submit]");
    const cancel = form.querySelector("button.cancel");
    const waiting = form.querySelector(".waiting");
    let controller = null;
    question.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    const stop = () => {
      if (controller) controller.abort();
    };
    cancel.addEventListener("click", stop);
    form.addEventListener("keydown", (event) => {
      if (event.key === "Escape") stop();
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (controller) return;
      controller = new AbortController();
      waiting.textContent = form.dataset.waiting;
      waiting.hidden = false;
      cancel.hidden = false;
      submit.disabled = true;
      cancel.focus();
      let page = null;
      try {
        const body = new URLSearchParams(new FormData(form));
        const reply = await fetch(form.action, { method: "POST", body, signal: controller.signal });
        page = new DOMParser().parseFromString(await reply.text(), "text/html");
      } catch (error) {
        waiting.textContent = error.name === "AbortError" ? form.dataset.cancelled : String(error);
      }
      controller = null;
      cancel.hidden = true;
      submit.disabled = false;
      const main = page && page.querySelector("main");
      if (!main) {
        question.focus();
        return;
      }
      document.title = page.title;
      document.querySelector("main").replaceWith(main);
      const next = main.querySelector("form.ask");
      if (next) enhanceAsk(next);
      main.focus();
    });
  };
  const form = document.querySelector("form.ask");
  if (form) enhanceAsk(form);

  const live = document.querySelectorAll("[data-live]");
  if (live.length && document.body.dataset.running === "1") {
    const key = (element) => {
      const box = element && element.closest("form");
      if (!box) return null;
      const field = box.querySelector("input[name=job], input[name=grant], input[name=folder]");
      return box.getAttribute("action") + "|" + (field ? field.value : "");
    };
    const refresh = async () => {
      let page;
      try {
        const reply = await fetch(window.location.pathname, { credentials: "same-origin", cache: "no-store" });
        if (!reply.ok) return window.setTimeout(refresh, 2000);
        page = new DOMParser().parseFromString(await reply.text(), "text/html");
      } catch (error) {
        return window.setTimeout(refresh, 2000);
      }
      const focused = key(document.activeElement);
      for (const part of document.querySelectorAll("[data-live]")) {
        const fresh = page.querySelector(`[data-live="${part.dataset.live}"]`);
        if (fresh) part.replaceChildren(...fresh.childNodes);
      }
      if (focused) {
        for (const button of document.querySelectorAll("[data-live] form button")) {
          if (key(button) === focused) button.focus();
        }
      }
      if (page.body.dataset.running === "1") window.setTimeout(refresh, 2000);
    };
    window.setTimeout(refresh, 2000);
  }
})();
