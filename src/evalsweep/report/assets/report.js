
(function () {
  "use strict";
  var table = document.getElementById("flips-table");
  if (table) {
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    var selects = Array.prototype.slice.call(document.querySelectorAll("select[data-filter]"));
    var search = document.getElementById("flip-search");
    var count = document.getElementById("flip-count");
    var apply = function () {
      var wanted = {};
      selects.forEach(function (s) { if (s.value) { wanted[s.dataset.filter] = s.value; } });
      var needle = search ? search.value.trim().toLowerCase() : "";
      var shown = 0;
      rows.forEach(function (row) {
        var ok = Object.keys(wanted).every(function (key) {
          return row.dataset[key] === wanted[key];
        });
        if (ok && needle) { ok = row.dataset.text.indexOf(needle) !== -1; }
        row.hidden = !ok;
        if (ok) { shown += 1; }
      });
      count.textContent = String(shown);
    };
    selects.forEach(function (s) { s.addEventListener("change", apply); });
    if (search) { search.addEventListener("input", apply); }
    apply();
  }
  var save = document.getElementById("save-json");
  if (save) {
    save.addEventListener("click", function () {
      var text = document.getElementById("evalsweep-document").textContent;
      var link = document.createElement("a");
      link.href = URL.createObjectURL(new Blob([text], { type: "application/json" }));
      link.download = "results.json";
      link.click();
      setTimeout(function () { URL.revokeObjectURL(link.href); }, 1000);
    });
  }
})();
