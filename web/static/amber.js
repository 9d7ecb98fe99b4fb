// Amber's pages work without this script; it adds sorting, keys between Trials, expanding long outputs and live
// progress. It never puts text from the server into the page as HTML: only textContent and attributes.
"use strict";

function sortTable(th) {
  const table = th.closest("table"), body = table.tBodies[0];
  const index = Array.from(th.parentNode.children).indexOf(th);
  const ascending = th.getAttribute("aria-sort") !== "ascending";
  table.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
  th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  const key = (row) => {
    const cell = row.children[index];
    const given = cell && cell.dataset.sort !== undefined ? cell.dataset.sort : (cell ? cell.textContent.trim() : "");
    const number = parseFloat(given);
    return Number.isNaN(number) ? given.toLowerCase() : number;
  };
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = key(a), y = key(b);
    const order = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1);
    return ascending ? order : -order;
  });
  rows.forEach((row) => body.appendChild(row));
}

// The Task matrix comes as data (#matrix-data) and is drawn here: a tenth of the bytes of its HTML.
function renderMatrix() {
  const table = document.getElementById("matrix"), data = document.getElementById("matrix-data");
  if (!table || !data) return;
  const { cells, rows } = JSON.parse(data.textContent);
  const base = table.dataset.base, body = document.createElement("tbody");
  for (const [task, differs, entries] of rows) {
    const tr = document.createElement("tr");
    if (differs) tr.className = "differs";
    const name = document.createElement("td");
    name.className = "task";
    name.textContent = task;
    name.dataset.sort = (differs ? "0 " : "1 ") + task;
    tr.appendChild(name);
    entries.forEach(([mean, trial, outcome, attempts, missing], i) => {
      const td = document.createElement("td");
      if (trial) {
        td.className = mean === null ? "rerr" : mean >= 1 ? "r1" : mean <= 0 ? "r0" : "rmid";
        td.dataset.sort = mean === null ? "-1" : String(mean);
        const link = document.createElement("a");
        link.href = base + encodeURIComponent(trial) + "?cell=" + encodeURIComponent(cells[i]);
        link.textContent = mean === null ? outcome : mean.toFixed(3);
        link.title = `${attempts} attempt${attempts === 1 ? "" : "s"}, the latest ${outcome}`;
        td.appendChild(link);
      } else if (missing) {
        td.className = "rerr";
        td.dataset.sort = "-2";
        td.textContent = "missing";
      } else {
        td.dataset.sort = "-3";
        td.textContent = "—";
      }
      tr.appendChild(td);
    });
    body.appendChild(tr);
  }
  table.replaceChild(body, table.tBodies[0]);
}

// A Trial's steps and model calls come as data (#trial-parts) and become elements when first opened: hundreds of
// them as HTML (or as <details>, each a shadow tree) are most of what a browser would parse before showing the
// page. Long texts are clipped with a "Show all"; every text is set as textContent, so nothing in it is markup.
const CLIP_CHARS = 1200, CLIP_LINES = 16;
let trialParts = null;

function partBody(part) {
  let body = part.querySelector(":scope > .body");
  if (body) return body;
  if (trialParts === null) {
    const data = document.getElementById("trial-parts");
    trialParts = data ? JSON.parse(data.textContent) : { s: [], c: [] };
  }
  const key = part.dataset.part, blocks = (trialParts[key[0]] || [])[parseInt(key.slice(1), 10)] || [];
  body = document.createElement("div");
  body.className = "body";
  for (const [heading, text, cut] of blocks) {
    if (heading) {
      const h = document.createElement("h4");
      h.textContent = heading;
      body.appendChild(h);
    }
    const pre = document.createElement("pre");
    pre.textContent = text;
    body.appendChild(pre);
    if (text.length > CLIP_CHARS || text.split("\n").length > CLIP_LINES) {
      pre.classList.add("clipped");
      const more = document.createElement("button");
      more.type = "button";
      more.textContent = "Show all";
      more.addEventListener("click", () => {
        more.textContent = pre.classList.toggle("clipped") ? "Show all" : "Show less";
      });
      body.appendChild(more);
    }
    if (cut) {
      const note = document.createElement("span");
      note.className = "muted";
      note.textContent = "(cut: the rest is in the Trial's folder)";
      body.appendChild(note);
    }
  }
  part.appendChild(body);
  return body;
}

function setOpen(part, open) {
  const toggle = part.querySelector(":scope > button.summary");
  if (open) partBody(part).hidden = false;
  else { const body = part.querySelector(":scope > .body"); if (body) body.hidden = true; }
  if (toggle) toggle.setAttribute("aria-expanded", String(open));
  part.classList.toggle("open", open);
}

function typing(event) {
  const t = event.target;
  return t && (t.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName));
}

// Headings sort their table: listened for on the document, so a table a live update put in sorts too.
function sortable() {
  document.querySelectorAll("table.sortable th").forEach((th) => { th.tabIndex = 0; });
}
document.addEventListener("click", (event) => {
  const th = event.target.closest && event.target.closest("table.sortable th");
  if (th) sortTable(th);
});
document.addEventListener("keydown", (event) => {
  const th = event.key === "Enter" && event.target.closest && event.target.closest("table.sortable th");
  if (th) sortTable(th);
});

document.addEventListener("DOMContentLoaded", () => {
  renderMatrix();
  sortable();
  document.querySelectorAll("button.expand").forEach((button) => {
    button.addEventListener("click", () => {
      const pre = document.getElementById(button.dataset.target);
      if (!pre) return;
      const full = pre.classList.toggle("clipped") === false;
      button.textContent = full ? "Show less" : button.dataset.more;
    });
  });
  // Keys between Trials: links marked data-key="ArrowLeft" etc. are followed when their key is pressed.
  document.addEventListener("keydown", (event) => {
    if (typing(event) || event.ctrlKey || event.metaKey || event.altKey) return;
    const link = document.querySelector(`a[data-key="${CSS.escape(event.key)}"]`);
    if (link) { event.preventDefault(); window.location.assign(link.href); }
  });
  // Live progress: a page marked data-refresh reloads its marked parts while something still runs.
  const live = document.querySelector("[data-refresh]");
  if (live) {
    const every = parseInt(live.dataset.refresh, 10) * 1000;
    const tick = async () => {
      try {
        const response = await fetch(window.location.href, { headers: { "Accept": "text/html" }, credentials: "same-origin" });
        if (!response.ok) return;
        const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
        document.querySelectorAll("[data-live]").forEach((part) => {
          const update = fresh.querySelector(`[data-live="${CSS.escape(part.dataset.live)}"]`);
          if (update) part.replaceWith(document.importNode(update, true));
        });
        renderMatrix();
        sortable();
        if (fresh.querySelector("[data-refresh]")) setTimeout(tick, every);
      } catch (e) { setTimeout(tick, every * 2); }
    };
    setTimeout(tick, every);
  }
});

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-toggle-steps]").forEach((button) => {
    button.addEventListener("click", () => {
      const open = button.dataset.toggleSteps === "open";
      document.querySelectorAll("[data-part]").forEach((part) => setOpen(part, open));
    });
  });
  document.querySelectorAll("[data-part]").forEach((part) => {
    if (part.dataset.open) setOpen(part, true);
    const toggle = part.querySelector(":scope > button.summary");
    if (toggle) toggle.addEventListener("click", () => setOpen(part, !part.classList.contains("open")));
  });
});
