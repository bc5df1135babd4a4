// cumulo's dashboard: the one script. Written for cumulo, no library.
// - Every element with data-live="URL" is fetched again 2 s after its last answer and its
//   content swapped in place when it changed: never while the page is hidden, nor while the user
//   types in a field of it; a focused link or button is focused again after the swap.
// - When the controller cannot be reached, the #conn notice says so and the page keeps trying,
//   less often (up to every 10 s); a 401 means the session is over: to the login page.
// - A form with data-confirm="question" asks before it is sent.
'use strict';
(function () {
  var EVERY = 2000;
  var MOST = 10000;
  var conn = document.getElementById('conn');
  var parts = Array.prototype.slice.call(document.querySelectorAll('[data-live]'));
  var last = new Map();

  function lost(yes) {
    if (conn) { conn.hidden = !yes; }
  }

  function typing(el) {
    var a = document.activeElement;
    return a && el.contains(a) && (a.tagName === 'INPUT' || a.tagName === 'TEXTAREA' || a.tagName === 'SELECT');
  }

  // What finds the focused element again in new content: its id, aria-label or link.
  function focusKey(el) {
    var a = document.activeElement;
    if (!a || a === el || !el.contains(a)) { return null; }
    var attrs = ['id', 'aria-label', 'href'];
    for (var i = 0; i < attrs.length; i++) {
      var v = a.getAttribute(attrs[i]);
      if (v) { return { attr: attrs[i], value: v }; }
    }
    return null;
  }

  function refocus(el, key) {
    if (!key) { return; }
    var found = Array.prototype.slice.call(el.querySelectorAll('[' + key.attr + ']'))
      .filter(function (e) { return e.getAttribute(key.attr) === key.value; })[0];
    if (found) { found.focus(); }
  }

  function swap(el, text) {
    if (last.get(el) === text || typing(el)) { return; }
    var key = focusKey(el);
    last.set(el, text);
    el.innerHTML = text;
    refocus(el, key);
    el.setAttribute('data-refreshed', String(Date.now()));
  }

  function poll(el, wait) {
    window.setTimeout(function () {
      if (document.hidden) { poll(el, EVERY); return; }
      fetch(el.getAttribute('data-live'), { credentials: 'same-origin', cache: 'no-store', headers: { 'Accept': 'text/html' } })
        .then(function (r) {
          if (r.status === 401) { window.location.assign('/ui/login?expired=1'); return null; }
          if (r.status >= 502) { throw new Error('unreachable'); }
          return r.text();
        })
        .then(function (text) {
          if (text === null) { return; }
          lost(false);
          swap(el, text);
          poll(el, EVERY);
        })
        .catch(function () {
          lost(true);
          poll(el, Math.min(wait * 2, MOST));
        });
    }, wait);
  }

  parts.forEach(function (el) { poll(el, EVERY); });

  document.addEventListener('submit', function (e) {
    var form = e.target;
    var question = form.getAttribute && form.getAttribute('data-confirm');
    if (question && !window.confirm(question)) { e.preventDefault(); }
  });
})();
