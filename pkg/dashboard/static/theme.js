// pepsi dashboard: the theme chosen with the header's switch (light or
// dark; none chosen: the system's), set on the page's root before it is
// drawn, so that it does not flash in the other one. dash.js runs the
// switch.
(function () {
	"use strict";
	try {
		var t = window.localStorage.getItem("pepsi-theme");
		if (t === "light" || t === "dark") {
			document.documentElement.setAttribute("data-theme", t);
		}
	} catch (e) {
		// No storage (refused): the system's theme.
	}
})();
