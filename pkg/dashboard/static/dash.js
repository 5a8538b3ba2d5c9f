// pepsi dashboard: its JavaScript (with theme.js), and none of the pages
// needs it.
//
// - A page whose body has data-refresh="N" reloads itself every N seconds
//   while it is visible, nobody is typing in a form, and no message is
//   ticked (without JavaScript, a <meta http-equiv="refresh"> reloads it).
// - "updated N s ago" (a <time data-since="UNIX">) counts on.
// - On a list: a box that ticks every message of the page, and the
//   buttons for the ticked messages off while none is.
// - The header's theme switch: the system's colours, light or dark, in
//   turn, remembered in localStorage (theme.js applies it as a page
//   loads).
(function () {
	"use strict";

	function span(s) {
		s = Math.max(0, Math.floor(s));
		if (s < 60) { return s + " s"; }
		if (s < 3600) { return Math.floor(s / 60) + " min"; }
		if (s < 48 * 3600) { return Math.floor(s / 3600) + " h"; }
		return Math.floor(s / 86400) + " d";
	}

	var since = document.querySelectorAll("time[data-since]");
	if (since.length > 0) {
		setInterval(function () {
			var now = Date.now() / 1000;
			since.forEach(function (t) {
				t.textContent = span(now - parseInt(t.getAttribute("data-since"), 10)) + " ago";
			});
		}, 1000);
	}

	var boxes = Array.prototype.slice.call(document.querySelectorAll('input[type="checkbox"][name="id"]'));
	var all = document.querySelector("input.tick-all");
	var buttons = document.querySelectorAll("button.ticked");
	var count = document.querySelector(".ticked-n");
	function ticked() {
		return boxes.filter(function (b) { return b.checked; }).length;
	}
	function update() {
		var n = ticked();
		buttons.forEach(function (b) { b.disabled = n === 0; });
		if (count) { count.textContent = " (" + n + ")"; }
		if (all) {
			all.checked = n > 0 && n === boxes.length;
			all.indeterminate = n > 0 && n < boxes.length;
		}
	}
	if (boxes.length > 0) {
		boxes.forEach(function (b) { b.addEventListener("change", update); });
		if (all) {
			all.hidden = false;
			all.addEventListener("change", function () {
				boxes.forEach(function (b) { b.checked = all.checked; });
				update();
			});
		}
		update();
	}

	var themes = ["auto", "light", "dark"];
	var themeButton = document.querySelector("button.theme");
	function theme() {
		var t = document.documentElement.getAttribute("data-theme");
		return themes.indexOf(t) > 0 ? t : "auto";
	}
	if (themeButton) {
		themeButton.textContent = "theme: " + theme();
		themeButton.hidden = false;
		themeButton.addEventListener("click", function () {
			var next = themes[(themes.indexOf(theme()) + 1) % themes.length];
			try {
				if (next === "auto") {
					window.localStorage.removeItem("pepsi-theme");
				} else {
					window.localStorage.setItem("pepsi-theme", next);
				}
			} catch (e) {
				// No storage: this page only.
			}
			if (next === "auto") {
				document.documentElement.removeAttribute("data-theme");
			} else {
				document.documentElement.setAttribute("data-theme", next);
			}
			themeButton.textContent = "theme: " + next;
		});
	}

	var every = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
	if (every > 0) {
		setInterval(function () {
			var a = document.activeElement;
			var typing = a && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA");
			if (document.visibilityState === "visible" && !typing && ticked() === 0) {
				window.location.reload();
			}
		}, every * 1000);
	}
})();
