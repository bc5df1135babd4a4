// cumulo's dashboard: the one script. Written for cumulo, no library.
// - Every element with data-live="URL" is fetched again every 2 s and its content swapped in
//   place when it changed (never while the page is hidden, nor while the user is typing in it).
// - When the controller cannot be reached, the #conn notice says so and the page keeps trying;
//   a 401 means the session is over: to the login page.
// - A form with data-confirm="question" asks before it is sent.
'use strict';
(function () {
  var EVERY = 2000;
  var conn = document.getElementById('conn');
  var parts = Array.prototype.slice.call(document.querySelectorAll('[data-live]'));
  var last = new Map();

  function lost(yes) {
    if (conn) { conn.hidden = !yes; }
  }

  function busy(el) {
    var active = document.activeElement;
    return active && el.contains(active) &&
      (active.tagName === 'INPUT' || active.tagName === 'TEXTAREA' || active.tagName === 'SELECT');
  }

  function refresh(el) {
    var url = el.getAttribute('data-live');
    return fetch(url, { credentials: 'same-origin', cache: 'no-store', headers: { 'Accept': 'text/html' } })
      .then(function (r) {
        if (r.status === 401) { window.location.assign('/ui/login?expired=1'); return null; }
        if (r.status >= 502) { lost(true); return null; }
        return r.text();
      })
      .then(function (text) {
        if (text === null) { return; }
        lost(false);
        if (last.get(el) !== text && !busy(el)) {
          last.set(el, text);
          el.innerHTML = text;
          el.setAttribute('data-refreshed', String(Date.now()));
        }
      })
      .catch(function () { lost(true); });
  }

  function tick() {
    if (document.hidden) { return; }
    parts.forEach(refresh);
  }

  if (parts.length > 0) {
    parts.forEach(function (el) { last.set(el, el.innerHTML); });
    window.setInterval(tick, EVERY);
  }

  document.addEventListener('submit', function (e) {
    var form = e.target;
    var question = form.getAttribute && form.getAttribute('data-confirm');
    if (question && !window.confirm(question)) { e.preventDefault(); }
  });
})();
