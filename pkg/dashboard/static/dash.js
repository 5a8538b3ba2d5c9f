// pepsi dashboard: the one piece of JavaScript, and none of the pages
// needs it. A page whose body has data-refresh="N" reloads itself every N
// seconds while it is visible and nobody is typing in a form.
(function () {
	"use strict";
	var every = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
	if (!(every > 0)) {
		return;
	}
	setInterval(function () {
		var a = document.activeElement;
		var typing = a && (a.tagName === "INPUT" || a.tagName === "SELECT" || a.tagName === "TEXTAREA");
		if (document.visibilityState === "visible" && !typing) {
			window.location.reload();
		}
	}, every * 1000);
})();
