// The console's one script: "select this page" in the DLQ workspace. The pages work without it.
"use strict";
document.addEventListener("DOMContentLoaded", function () {
  var all = document.getElementById("select-page");
  if (!all) { return; }
  all.addEventListener("change", function () {
    var picks = document.querySelectorAll("input.pick");
    for (var i = 0; i < picks.length; i++) { picks[i].checked = all.checked; }
  });
});
