// Progressive enhancement for the dashboard; every page works without it.
(function () {
  "use strict";
  // "Select all on this page" for the dead-letter list, and a live count of
  // the selection.
  var all = document.querySelector("[data-select-all]");
  var boxes = Array.prototype.slice.call(document.querySelectorAll('input[type=checkbox][name=id][form=sel]'));
  var count = document.querySelector("[data-selected-count]");
  var scopeAll = document.querySelector('input[name=scope][value=all]');
  function update() {
    var n = boxes.filter(function (b) { return b.checked; }).length;
    if (all) {
      all.checked = n > 0 && n === boxes.length;
      all.indeterminate = n > 0 && n < boxes.length;
    }
    if (count) {
      count.textContent = scopeAll && scopeAll.checked ? "All that match the filter" : n === 0 ? "None selected" : n + " selected";
    }
  }
  if (all && boxes.length) {
    all.hidden = false;
    all.addEventListener("change", function () {
      boxes.forEach(function (b) { b.checked = all.checked; });
      update();
    });
  }
  boxes.forEach(function (b) { b.addEventListener("change", update); });
  if (scopeAll) { scopeAll.addEventListener("change", update); }
  if (count) { update(); }
})();
