// enablebot dashboard tables: click-to-sort headers, and for the model table filters,
// a search box and filters preset from the address (models.html?verdict=graph_break).
// Plain JavaScript, no library; the tables are complete HTML without it.
(function () {
  "use strict";

  function cellValue(row, col, numeric) {
    var cell = row.cells[col];
    if (!cell) return numeric ? NaN : "";
    var raw = cell.hasAttribute("data-sort") ? cell.getAttribute("data-sort") : cell.textContent.trim();
    if (numeric) return raw === "" ? NaN : parseFloat(raw.replace(/[^0-9eE.+-]/g, ""));
    return raw.toLowerCase();
  }

  function sortTable(table, button) {
    var th = button.closest("th");
    var col = th.cellIndex;
    var numeric = th.hasAttribute("data-num");
    var dir = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
    table.querySelectorAll("th[aria-sort]").forEach(function (t) { t.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", dir);
    var sign = dir === "ascending" ? 1 : -1;
    var tbody = table.tBodies[0];
    var keyed = Array.prototype.map.call(tbody.rows, function (row, i) {
      return { v: cellValue(row, col, numeric), i: i, row: row };
    });
    keyed.sort(function (a, b) {
      // Empty cells last in either direction; ties keep their order.
      var ae = numeric ? isNaN(a.v) : a.v === "", be = numeric ? isNaN(b.v) : b.v === "";
      if (ae !== be) return ae ? 1 : -1;
      if (a.v < b.v) return -sign;
      if (a.v > b.v) return sign;
      return a.i - b.i;
    });
    var frag = document.createDocumentFragment();
    keyed.forEach(function (k) { frag.appendChild(k.row); });
    tbody.appendChild(frag);
  }

  function setupFilters(table, form, status) {
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var texts = rows.map(function (r) { return r.textContent.toLowerCase(); });
    var selects = form.querySelectorAll("select[data-col]");
    var search = form.querySelector("input[type=search]");
    function apply() {
      var wanted = [];
      selects.forEach(function (s) { if (s.value) wanted.push([parseInt(s.getAttribute("data-col"), 10), s.value]); });
      var q = search ? search.value.trim().toLowerCase() : "";
      var shown = 0;
      rows.forEach(function (row, i) {
        // A cell matches when it holds the value as a whole word ("✓ full_graph", "GB0033 GB0036").
        var ok = wanted.every(function (w) {
          var cell = row.cells[w[0]];
          return cell !== undefined && cell.textContent.trim().split(/\s+/).indexOf(w[1]) >= 0;
        });
        if (ok && q) ok = texts[i].indexOf(q) >= 0;
        row.hidden = !ok;
        if (ok) shown += 1;
      });
      if (status) status.textContent = shown + " of " + rows.length + " rows shown";
    }
    form.addEventListener("input", apply);
    form.addEventListener("change", apply);
    form.addEventListener("reset", function () { window.setTimeout(apply, 0); });
    var params = new URLSearchParams(window.location.search);
    selects.forEach(function (s) {
      var v = params.get(s.name);
      if (v !== null && Array.prototype.some.call(s.options, function (o) { return o.value === v; })) s.value = v;
    });
    if (search && params.get("q")) search.value = params.get("q");
    apply();
  }

  document.querySelectorAll("table[data-sortable]").forEach(function (table) {
    table.querySelectorAll("thead th button").forEach(function (button) {
      button.addEventListener("click", function () { sortTable(table, button); });
    });
    var form = table.getAttribute("data-filters") && document.getElementById(table.getAttribute("data-filters"));
    if (form) setupFilters(table, form, document.getElementById(table.getAttribute("data-count")));
  });
})();
