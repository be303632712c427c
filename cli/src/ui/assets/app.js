// spindle ui: the dashboard's pages. Plain JavaScript, no build step, no framework, nothing
// fetched from elsewhere: one shell page (index.html) for every path, and this script draws
// the page the path names from the JSON API under /api/ (see the server's ui/api.rs).
//
// Every piece of data goes into the DOM as text (textContent, attributes), never as HTML.
// The API token typed to sign in is sent once in a POST body and then forgotten: never put in
// a URL, the browser's storage or the console.
'use strict';

(() => {
  // ------------------------------------------------------------------------------------------
  // DOM helpers

  const SVG_NS = 'http://www.w3.org/2000/svg';
  const enc = encodeURIComponent;

  /** An element: `h('a', {href, class, text, testid, data: {..}, on: {click}}, ...children)`. */
  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    setProps(el, props);
    add(el, kids);
    return el;
  }

  function setProps(el, props) {
    if (!props) return;
    for (const [key, value] of Object.entries(props)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'text') el.textContent = String(value);
      else if (key === 'testid') el.setAttribute('data-testid', value);
      else if (key === 'style' && typeof value === 'object') Object.assign(el.style, value);
      else if (key === 'data') {
        for (const [name, v] of Object.entries(value)) if (v !== undefined && v !== null) el.dataset[name] = String(v);
      } else if (key === 'on') {
        for (const [name, fn] of Object.entries(value)) el.addEventListener(name, fn);
      } else if (['value', 'checked', 'disabled', 'hidden', 'open', 'selected'].includes(key)) el[key] = value;
      else el.setAttribute(key, value === true ? '' : String(value));
    }
  }

  function add(el, kids) {
    for (const kid of kids) {
      if (kid === undefined || kid === null || kid === false) continue;
      if (Array.isArray(kid)) add(el, kid);
      else if (kid instanceof Node) el.appendChild(kid);
      else el.appendChild(document.createTextNode(String(kid)));
    }
  }

  /** An SVG element with attributes. */
  function sv(tag, attrs, ...kids) {
    const el = document.createElementNS(SVG_NS, tag);
    if (attrs) for (const [k, v] of Object.entries(attrs)) if (v !== undefined && v !== null) el.setAttribute(k, String(v));
    add(el, kids);
    return el;
  }

  function svText(attrs, text) {
    const el = sv('text', attrs);
    el.textContent = text;
    return el;
  }

  const td = (...kids) => h('td', null, ...kids);
  const tdNum = (...kids) => h('td', { class: 'num' }, ...kids);
  const dash = () => h('span', { class: 'muted', text: '—' });

  function table(testid, headers, body) {
    return h('div', { class: 'table-wrap' },
      h('table', { class: 'table', testid },
        h('thead', null, h('tr', null, headers.map((label) => {
          const [text, cls] = Array.isArray(label) ? label : [label, null];
          return h('th', { class: cls, text });
        }))),
        body));
  }

  function emptyRow(colspan, text) {
    return h('tr', { class: 'empty' }, h('td', { colspan, class: 'muted', text }));
  }

  /** A table body's rows, or one row saying there are none. */
  function rowsOr(rows, colspan, text) {
    return rows.length ? rows : [emptyRow(colspan, text)];
  }

  /** An array as the API gives it, or an empty one. */
  const listOf = (value) => (Array.isArray(value) ? value : []);

  /** The parameters of the page's address. */
  const urlParams = () => new URL(location.href).searchParams;

  function searchInput(value, placeholder, testid, label, props = {}) {
    return h('input', { type: 'search', value, placeholder, testid, 'aria-label': label, ...props });
  }

  /** `Parent / here` above a page. */
  function crumbs(href, text, here) {
    return h('p', { class: 'crumbs' }, h('a', { href, text }), ' / ', here);
  }

  function button(text, onClick, props = {}) {
    return h('button', { type: 'button', class: 'btn', ...props, text, on: { click: onClick } });
  }

  function select(options, value, props) {
    const el = h('select', props);
    for (const [val, label] of options) el.appendChild(h('option', { value: val, text: label, selected: val === value }));
    return el;
  }

  function debounce(fn, ms) {
    let timer = null;
    const wrapped = (...args) => {
      clearTimeout(timer);
      timer = setTimeout(() => { timer = null; fn(...args); }, ms);
    };
    wrapped.cancel = () => clearTimeout(timer);
    return wrapped;
  }

  // ------------------------------------------------------------------------------------------
  // Formatting

  const pad = (n) => String(n).padStart(2, '0');
  const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

  function fullTime(ms) {
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  /** Local time: the time of day today, the day and time this year, the date before. */
  function shortTime(ms) {
    const d = new Date(ms);
    const now = new Date();
    const clock = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    if (d.toDateString() === now.toDateString()) return clock;
    if (d.getFullYear() === now.getFullYear()) return `${MONTHS[d.getMonth()]} ${d.getDate()}, ${clock.slice(0, 5)}`;
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${clock.slice(0, 5)}`;
  }

  function relTime(ms) {
    const seconds = (Date.now() - ms) / 1000;
    const a = Math.abs(seconds);
    if (a < 5) return 'just now';
    let text;
    if (a < 60) text = `${Math.round(a)} s`;
    else if (a < 3600) text = `${Math.round(a / 60)} min`;
    else if (a < 86400) text = `${Math.round(a / 3600)} h`;
    else text = `${Math.round(a / 86400)} d`;
    return seconds < 0 ? `in ${text}` : `${text} ago`;
  }

  /** A timestamp (ms since the epoch) as local time, relative in its title. */
  function timeEl(ms) {
    if (ms === null || ms === undefined) return dash();
    return h('time', {
      datetime: new Date(ms).toISOString(),
      title: `${relTime(ms)} · ${fullTime(ms)}`,
      data: { ms },
      text: shortTime(ms),
    });
  }

  // Relative titles age: recompute on hover.
  document.addEventListener('mouseover', (event) => {
    const el = event.target instanceof Element ? event.target.closest('time[data-ms]') : null;
    if (el) el.title = `${relTime(Number(el.dataset.ms))} · ${fullTime(Number(el.dataset.ms))}`;
  });

  function duration(ms) {
    if (ms === null || ms === undefined || !Number.isFinite(ms)) return '—';
    ms = Math.max(0, ms);
    if (ms < 1000) return `${Math.round(ms)} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.floor(s)} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m}m ${pad(Math.floor(s % 60))}s`;
    const hours = Math.floor(m / 60);
    if (hours < 24) return `${hours}h ${pad(m % 60)}m`;
    return `${Math.floor(hours / 24)}d ${hours % 24}h`;
  }

  /** A long id shortened: a UUID to its first 13 characters (a prefix the CLI takes). */
  function shortId(id) {
    const text = String(id ?? '');
    if (/^[0-9a-f]{8}-[0-9a-f]{4}-/i.test(text) && text.length > 14) return `${text.slice(0, 13)}…`;
    if (text.length > 30) return `${text.slice(0, 28)}…`;
    return text;
  }

  function idEl(id, href) {
    const props = { class: 'mono id', title: String(id ?? ''), text: shortId(id) };
    return href ? h('a', { ...props, href }) : h('span', props);
  }

  function badge(status, title) {
    const text = String(status ?? 'unknown');
    return h('span', {
      class: `badge st-${text.replace(/[^a-z0-9_-]/gi, '')}`,
      data: { status: text },
      title,
      text: text.replace(/_/g, ' '),
    });
  }

  function truncate(text, max) {
    return text.length > max ? `${text.slice(0, max - 1)}…` : text;
  }

  function pretty(value) {
    const text = JSON.stringify(value, null, 2);
    return text === undefined ? 'null' : text;
  }

  function compactJson(value, max = 120) {
    const full = typeof value === 'string' ? value : (JSON.stringify(value) ?? '');
    return h('span', { class: 'mono json', title: truncate(full, 4000), text: truncate(full, max) });
  }

  function pre(text, cls, testid) {
    return h('pre', { class: cls ? `pre ${cls}` : 'pre', testid, text });
  }

  function plural(n, word, many) {
    return `${n} ${n === 1 ? word : (many ?? `${word}s`)}`;
  }

  // ------------------------------------------------------------------------------------------
  // The API

  class ApiError extends Error {
    constructor(status, message, path) {
      super(message);
      this.status = status;
      this.path = path;
    }
  }

  /** The session as GET /api/session answers it, or null (no such route, or it failed). */
  let session = null;

  async function api(path, options = {}) {
    const method = options.method ?? 'GET';
    const headers = { Accept: 'application/json' };
    const init = { method, headers, credentials: 'same-origin', cache: 'no-store' };
    if (method !== 'GET') {
      headers['Content-Type'] = 'application/json';
      headers['X-Spindle-Csrf'] = session?.csrf ?? '';
      init.body = JSON.stringify(options.body ?? {});
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch {
      throw new ApiError(0, 'The server did not answer: is spindle ui still running?', path);
    }
    const text = await response.text();
    let data;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = undefined;
    }
    if (!response.ok) {
      const message = data && typeof data.error === 'string'
        ? data.error
        : (text && data === undefined ? truncate(text, 300) : (response.statusText || 'the request failed'));
      throw new ApiError(response.status, message, path);
    }
    if (data === undefined) throw new ApiError(response.status, 'the answer is not JSON', path);
    return data;
  }

  /** A POST with the session's anti-forgery token; once more with a fresh session if it lapsed. */
  async function post(path, body) {
    try {
      return await api(path, { method: 'POST', body });
    } catch (error) {
      if (error.status === 403 && /session|csrf/i.test(error.message)) {
        await loadSession();
        return api(path, { method: 'POST', body });
      }
      throw error;
    }
  }

  function query(params) {
    const search = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') search.set(k, String(v));
    const text = search.toString();
    return text ? `?${text}` : '';
  }

  // ------------------------------------------------------------------------------------------
  // Live updates: Server-Sent Events, or polling when the server has no room (503) or the
  // stream keeps failing. Closed with the page.

  function live(cx, stream, { onEvent, onOpen, onPoll, pollMs = 5000, onState, after }) {
    let source = null;
    let pollTimer = null;
    let failures = 0;
    let closed = false;
    const state = (s) => { if (onState) onState(s); };
    const poll = () => {
      if (closed || pollTimer) return;
      if (source) { source.close(); source = null; }
      state('polling');
      pollTimer = setInterval(() => { if (!closed) onPoll(); }, pollMs);
      onPoll();
    };
    if (typeof EventSource === 'undefined') {
      poll();
    } else {
      source = new EventSource(`/api/live${query({ stream, after })}`);
      state('connecting');
      source.onopen = () => {
        failures = 0;
        state('live');
        if (onOpen) onOpen();
      };
      source.onmessage = (message) => {
        failures = 0;
        let event;
        try { event = JSON.parse(message.data); } catch { return; }
        onEvent(event);
      };
      source.onerror = () => {
        failures += 1;
        if (!source || source.readyState === EventSource.CLOSED || failures >= 3) poll();
        else state('reconnecting');
      };
    }
    const close = () => {
      if (closed) return;
      closed = true;
      if (source) { source.close(); source = null; }
      if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
      state('off');
    };
    cx.on(close);
    return { close };
  }

  function liveBadge() {
    const el = h('span', { class: 'live-state', testid: 'live-state' });
    const labels = {
      connecting: ['connecting…', 'Opening the live stream'],
      live: ['live', 'Updates as the store commits (Server-Sent Events)'],
      reconnecting: ['reconnecting…', 'The live stream dropped; the browser reconnects'],
      polling: ['polling', 'No live stream: reading again every few seconds'],
      off: ['', ''],
      finished: ['finished', 'Nothing more will change'],
    };
    el.set = (s) => {
      const [text, title] = labels[s] ?? [s, ''];
      el.textContent = text;
      el.title = title;
      el.dataset.state = s;
      el.hidden = !text;
    };
    el.hidden = true;
    return el;
  }

  // ------------------------------------------------------------------------------------------
  // The shell: header with the pages and the sign-in box, the page, notices

  const NAV = [
    ['overview', 'Overview', '/'],
    ['runs', 'Runs', '/runs'],
    ['queues', 'Queues', '/queues'],
    ['schedules', 'Schedules', '/schedules'],
    ['processes', 'Processes', '/processes'],
    ['workflows', 'Workflows', '/workflows'],
    ['events', 'Events', '/events'],
    ['tenants', 'Tenants', '/tenants'],
  ];

  let mainEl;
  let navEl;
  let sessionBox;
  let tenantEl;
  let noticesEl;

  function logo() {
    return sv('svg', { viewBox: '0 0 32 32', width: 22, height: 22, 'aria-hidden': 'true' },
      sv('rect', { x: 1, y: 1, width: 30, height: 30, rx: 8, fill: '#4f46e5' }),
      sv('path', { d: 'M9 9c5 2 9 2 14 0M9 16c5 2 9 2 14 0M9 23c5 2 9 2 14 0', stroke: '#fff', 'stroke-width': 2.2, fill: 'none', 'stroke-linecap': 'round' }),
      sv('path', { d: 'M16 5v22', stroke: '#c7d2fe', 'stroke-width': 2, 'stroke-linecap': 'round' }));
  }

  function shell() {
    const root = document.getElementById('app') ?? document.body;
    navEl = h('nav', { class: 'nav', 'aria-label': 'Pages' },
      NAV.map(([key, label, href]) => h('a', { href, testid: `nav-${key}`, data: { nav: key }, text: label })));
    tenantEl = h('span', { class: 'tenant', testid: 'tenant' });
    sessionBox = h('div', { class: 'session', testid: 'session', hidden: true });
    const header = h('header', { class: 'top' },
      h('a', { class: 'brand', href: '/', testid: 'brand' }, logo(), h('span', { text: 'Spindle' })),
      navEl,
      h('div', { class: 'spacer' }),
      tenantEl,
      sessionBox);
    mainEl = h('main', { id: 'main' });
    noticesEl = h('div', { class: 'notices', testid: 'notices', 'aria-live': 'polite' });
    root.replaceChildren(header, mainEl, noticesEl);
  }

  function setNav(key) {
    for (const a of navEl.querySelectorAll('a')) {
      const on = a.dataset.nav === key;
      a.classList.toggle('active', on);
      if (on) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    }
  }

  /** A short message at the bottom right. */
  function notify(text, kind = 'ok') {
    const el = h('div', { class: `notice notice-${kind}`, testid: 'notice', role: kind === 'error' ? 'alert' : 'status', text });
    noticesEl.appendChild(el);
    setTimeout(() => el.remove(), kind === 'error' ? 9000 : 4000);
  }

  /** A modal question; resolves true when confirmed. */
  function confirmBox(title, text, okLabel) {
    return new Promise((resolve) => {
      const cancel = button('Cancel', () => done(false), { testid: 'confirm-cancel' });
      const ok = button(okLabel, () => done(true), { class: 'btn btn-danger', testid: 'confirm-ok' });
      const dialog = h('dialog', { class: 'confirm', testid: 'confirm-dialog' },
        h('h2', { text: title }), h('p', { text }), h('div', { class: 'dialog-actions' }, cancel, ok));
      function done(value) {
        dialog.close();
        dialog.remove();
        resolve(value);
      }
      dialog.addEventListener('cancel', (event) => { event.preventDefault(); done(false); });
      document.body.appendChild(dialog);
      dialog.showModal();
      cancel.focus();
    });
  }

  /** An error's message, with its HTTP status when it has one. */
  function errorText(error) {
    return `${error.message}${error.status ? ` (HTTP ${error.status})` : ''}`;
  }

  /** What went wrong, in the page: the server's message and the HTTP status. */
  function errorPanel(error, title) {
    const status = error?.status;
    const heading = title ?? (status ? `HTTP ${status}` : status === 0 ? 'No answer' : 'Error');
    const panel = h('div', { class: 'error-panel', role: 'alert', testid: 'error' },
      h('strong', { class: 'error-title', text: heading }),
      h('span', { class: 'error-message', text: error?.message ?? String(error) }));
    if (status === 401 && session && (session.login_required || session.actions)) {
      panel.appendChild(h('div', { class: 'hint', text: 'Sign in with an API token of the tenant (top right).' }));
      promptSignIn();
    }
    return panel;
  }

  /** Waits for a read of the API and hands its answer to `draw`; a failure is shown in
   * `problem` (emptied again by a success) and then told to `failed`. Nothing happens once
   * the page is closed or, with `current`, once a later read has taken this one's place. */
  async function read(cx, problem, request, draw, { current = () => true, failed } = {}) {
    let data;
    try {
      data = await request;
    } catch (error) {
      if (cx.alive && current()) {
        problem.replaceChildren(errorPanel(error));
        if (failed) failed(error);
      }
      return;
    }
    if (!cx.alive || !current()) return;
    problem.replaceChildren();
    draw(data);
  }

  function pageHead(title, ...extra) {
    return h('div', { class: 'page-head' }, h('h1', null, title), ...extra);
  }

  function section(title, ...kids) {
    return h('section', { class: 'section' }, h('h2', null, title), ...kids);
  }

  // ------------------------------------------------------------------------------------------
  // Session and sign-in

  async function loadSession() {
    try {
      session = await api('/api/session');
    } catch {
      session = null;
    }
    renderSession();
    return session;
  }

  let signInMessage = null;
  let signInInput = null;

  function renderSession() {
    tenantEl.textContent = session?.tenant ? `tenant ${session.tenant}` : '';
    tenantEl.hidden = !session?.tenant;
    sessionBox.replaceChildren();
    signInInput = null;
    signInMessage = null;
    if (!session || !(session.actions || session.login_required)) {
      sessionBox.hidden = true;
      return;
    }
    sessionBox.hidden = false;
    if (session.signed_in) {
      sessionBox.append(
        h('span', { class: 'signed-in', testid: 'signed-in', text: `signed in as ${session.signed_in.role} of ${session.signed_in.tenant}` }),
        button('Sign out', signOut, { class: 'btn btn-small', testid: 'signout' }));
      return;
    }
    // No name on the input and a POST form: were the script to fail, the token would still
    // never land in a URL.
    signInInput = h('input', {
      type: 'password', testid: 'signin-token', placeholder: 'API token (spn_…)', autocomplete: 'off',
      spellcheck: 'false', 'aria-label': 'API token',
    });
    signInMessage = h('div', { class: 'signin-message', testid: 'signin-message', role: 'status', hidden: true });
    signInInput.addEventListener('input', () => showSignInMessage(''));
    const form = h('form', { class: 'signin', method: 'post', testid: 'signin', on: { submit: signIn } },
      signInInput,
      h('button', { type: 'submit', class: 'btn btn-primary btn-small', testid: 'signin-submit', text: 'Sign in' }),
      signInMessage);
    sessionBox.appendChild(form);
  }

  let signInMessageTimer = null;
  function showSignInMessage(text, kind = 'info') {
    if (!signInMessage) return;
    signInMessage.textContent = text;
    signInMessage.dataset.kind = kind;
    signInMessage.hidden = !text;
    clearTimeout(signInMessageTimer);
    if (text) signInMessageTimer = setTimeout(() => showSignInMessage(''), 10000);
  }

  /** Draws attention to the sign-in box (an action needs a signed-in session). */
  function promptSignIn(text) {
    if (!signInInput) return;
    if (!text && document.activeElement === signInInput) return;
    sessionBox.classList.remove('attention');
    void sessionBox.offsetWidth;
    sessionBox.classList.add('attention');
    if (text) showSignInMessage(text);
    signInInput.focus();
  }

  async function signIn(event) {
    event.preventDefault();
    const input = signInInput;
    if (!input) return;
    let token = input.value.trim();
    input.value = '';
    if (!token) {
      showSignInMessage('Paste an API token of the tenant (spindle tokens create NAME --role writer).');
      input.focus();
      return;
    }
    try {
      session = await post('/api/session', { token });
    } catch (error) {
      token = '';
      showSignInMessage(errorText(error), 'error');
      input.focus();
      return;
    }
    token = '';
    renderSession();
    notify(`Signed in as ${session.signed_in?.role ?? 'reader'}`);
    sessionChanged();
  }

  async function signOut() {
    try {
      session = await post('/api/session/logout', {});
    } catch (error) {
      notify(`Could not sign out: ${error.message}`, 'error');
      return;
    }
    renderSession();
    notify('Signed out');
    sessionChanged();
  }

  function sessionChanged() {
    if (session?.login_required) render();
    else window.dispatchEvent(new Event('spindle:session'));
  }

  /** True when actions may be tried; otherwise points at the sign-in box. */
  function ensureSignedIn(what) {
    if (!session?.actions) {
      notify('Actions are off: start spindle ui with --allow-actions.', 'error');
      return false;
    }
    if (!session.signed_in) {
      promptSignIn(`Sign in with a writer or admin token to ${what}.`);
      return false;
    }
    return true;
  }

  /** Runs an action (a POST); a refusal is shown, and a lapsed sign-in asks again. */
  async function act(path, what) {
    if (!ensureSignedIn(what)) return null;
    try {
      return await post(path, {});
    } catch (error) {
      if (error.status === 401) {
        await loadSession();
        promptSignIn(error.message);
      }
      notify(errorText(error), 'error');
      return null;
    }
  }

  // ------------------------------------------------------------------------------------------
  // Pages: a context per page, closed (timers, live streams) when another page is drawn

  let current = null;

  function newPage() {
    if (current) {
      current.alive = false;
      for (const fn of current.cleanups.splice(0)) {
        try { fn(); } catch { /* already gone */ }
      }
    }
    const cx = {
      alive: true,
      cleanups: [],
      on(fn) { this.cleanups.push(fn); },
      every(fn, ms) {
        const id = setInterval(() => { if (this.alive) Promise.resolve().then(fn).catch(() => {}); }, ms);
        this.on(() => clearInterval(id));
      },
      listen(target, name, fn) {
        target.addEventListener(name, fn);
        this.on(() => target.removeEventListener(name, fn));
      },
    };
    current = cx;
    return cx;
  }

  const ROUTES = [
    [/^\/$/, 'overview', 'Overview', overviewPage],
    [/^\/runs$/, 'runs', 'Runs', runsPage],
    [/^\/runs\/([^/]+)$/, 'runs', 'Run', graphPage],
    [/^\/queues$/, 'queues', 'Queues', queuesPage],
    [/^\/queues\/([^/]+)$/, 'queues', 'Queue', queuePage],
    [/^\/schedules$/, 'schedules', 'Schedules', schedulesPage],
    [/^\/processes$/, 'processes', 'Processes', processesPage],
    [/^\/workflows$/, 'workflows', 'Workflows', workflowsPage],
    [/^\/workflows\/([^/]+)$/, 'workflows', 'Workflow execution', workflowPage],
    [/^\/events$/, 'events', 'Events', eventsPage],
    [/^\/tenants$/, 'tenants', 'Tenants and tokens', tenantsPage],
  ];

  function render() {
    const cx = newPage();
    const path = location.pathname.length > 1 ? location.pathname.replace(/\/+$/, '') : '/';
    mainEl.replaceChildren();
    mainEl.className = '';
    for (const [pattern, nav, title, page] of ROUTES) {
      const found = pattern.exec(path);
      if (!found) continue;
      let params;
      try {
        params = found.slice(1).map(decodeURIComponent);
      } catch {
        break;
      }
      setNav(nav);
      document.title = `${title} · Spindle`;
      Promise.resolve()
        .then(() => page(cx, mainEl, ...params))
        .catch((error) => {
          if (cx.alive) mainEl.prepend(errorPanel(error, error instanceof ApiError ? undefined : 'The page failed'));
        });
      return;
    }
    setNav(null);
    document.title = 'No such page · Spindle';
    mainEl.append(
      errorPanel({ status: 404, message: `No such page: ${location.pathname}` }, 'No such page'),
      h('p', { class: 'muted' }, 'The pages: ', NAV.map(([, label, href], i) => [i ? ' · ' : '', h('a', { href, text: label })])));
  }

  function navigate(url, { replace = false } = {}) {
    if (replace) history.replaceState(null, '', url);
    else history.pushState(null, '', url);
    render();
    window.scrollTo(0, 0);
  }

  // Links inside the app draw the page without loading it again.
  document.addEventListener('click', (event) => {
    if (event.defaultPrevented || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    const link = event.target instanceof Element ? event.target.closest('a[href]') : null;
    if (!link || link.target || link.hasAttribute('download')) return;
    const url = new URL(link.href, location.href);
    if (url.origin !== location.origin || url.pathname.startsWith('/api/') || url.pathname.startsWith('/assets/')) return;
    event.preventDefault();
    navigate(url.pathname + url.search + url.hash);
  });

  window.addEventListener('popstate', () => render());

  /** Sets (or removes) parameters of the address without drawing the page again. */
  function setParams(params, { push = false, state = null } = {}) {
    const url = new URL(location.href);
    for (const [k, v] of Object.entries(params)) {
      if (v === undefined || v === null || v === '') url.searchParams.delete(k);
      else url.searchParams.set(k, v);
    }
    if (push) history.pushState(state, '', url);
    else history.replaceState(state ?? history.state, '', url);
  }

  /** Previous / next buttons over keyset pages: `after` in the address, earlier cursors in the
   * history entry's state (a stack), so that links and the Back button work. */
  function pager(onMove) {
    let next = null;
    const info = h('span', { class: 'muted small', testid: 'pager-info' });
    const stack = () => listOf(history.state?.stack);
    const prev = button('← Previous', () => {
      const earlier = stack();
      const back = earlier.length ? earlier[earlier.length - 1] : '';
      setParams({ after: back }, { push: true, state: { stack: earlier.slice(0, -1) } });
      onMove();
    }, { testid: 'pager-prev' });
    const nextButton = button('Next page →', () => {
      if (!next) return;
      const here = urlParams().get('after') ?? '';
      setParams({ after: next }, { push: true, state: { stack: [...stack(), here] } });
      onMove();
    }, { testid: 'pager-next' });
    const el = h('div', { class: 'pager', hidden: true }, prev, nextButton, info);
    el.update = (cursor, shown) => {
      next = cursor ?? null;
      const paged = Boolean(urlParams().get('after'));
      const depth = stack().length;
      nextButton.disabled = !next;
      prev.disabled = !paged;
      prev.textContent = paged && depth === 0 ? '← First page' : '← Previous';
      // The page number is known when the earlier cursors are (not after a pasted link).
      const number = !paged ? 1 : depth > 0 ? depth + 1 : null;
      info.textContent = `${number ? `page ${number} · ` : ''}${plural(shown, 'row')}`;
      el.hidden = !paged && !next;
    };
    return el;
  }

  /** A select of `statuses` (or any status), set from the address. */
  function statusSelect(statuses, params, testid) {
    return select([['', 'any status'], ...statuses.map((s) => [s, s])], params.get('status') ?? '', { testid, 'aria-label': 'Status' });
  }

  /** A list page: a filter form in the head, then a table read by keyset pages from `path`
   * with the address's filters and page, and the pager. A field is [label, parameter, control,
   * how the control's value goes in the address (trimmed by default)]: a choice applies at
   * once, typing after a pause, either from the first page. `params(p)` gives the API's
   * filters (by default the fields' parameters as in the address); `draw(items, body, p)` fills
   * the table. Resolves, after the first read, with the function that reads again. */
  async function listPage(cx, main, { title, form, fields, path, params, testid, headers, draw }) {
    const body = h('tbody');
    const problem = h('div');
    const pages = pager(() => load());
    const refilter = () => {
      const values = {};
      for (const [, param, control, inAddress] of fields) values[param] = inAddress ? inAddress(control.value) : control.value.trim();
      setParams({ ...values, after: null }, { state: { stack: [] } });
      load();
    };
    const typed = debounce(refilter, 400);
    for (const [, , control] of fields) {
      if (control.tagName === 'SELECT') control.addEventListener('change', refilter);
      else control.addEventListener('input', typed);
    }
    const filters = h('form', { class: 'filters', ...form, on: { submit: (e) => { e.preventDefault(); typed.cancel(); refilter(); } } },
      fields.map(([label, , control]) => h('label', null, `${label} `, control)));
    main.append(pageHead(title, filters), problem, table(testid, headers, body), pages);

    let loading = 0;
    async function load() {
      const mine = ++loading;
      const p = urlParams();
      const filter = params ? params(p) : Object.fromEntries(fields.map(([, param]) => [param, p.get(param)]));
      await read(cx, problem, api(`${path}${query({ ...filter, after: p.get('after'), limit: 50 })}`), (page) => {
        const items = listOf(page.items);
        draw(items, body, p);
        pages.update(page.next, items.length);
      }, { current: () => mine === loading });
    }
    await load();
    return load;
  }

  // ------------------------------------------------------------------------------------------
  // Overview

  const RUN_STATUSES = ['pending', 'running', 'complete', 'failed', 'cancelled'];
  const RUN_DONE = new Set(['complete', 'failed', 'cancelled']);
  const NODE_STATUSES = ['pending', 'ready', 'running', 'complete', 'failed', 'skipped'];
  const WORKFLOW_STATUSES = ['pending', 'running', 'paused', 'completed', 'failed', 'cancelled'];
  const WORKFLOW_DONE = new Set(['completed', 'failed', 'cancelled']);

  async function overviewPage(cx, main) {
    const updated = h('span', { class: 'muted small', testid: 'overview-updated' });
    const problem = h('div');
    const root = h('div', { class: 'overview', testid: 'overview' });
    main.append(pageHead('Overview', updated), problem, root);
    const load = () => read(cx, problem, api('/api/overview'), (data) => {
      root.replaceChildren(...overview(data));
      updated.textContent = `updated ${shortTime(Date.now())} · every 5 s`;
    });
    await load();
    cx.every(load, 5000);
  }

  function overview(data) {
    const queues = listOf(data.queues);
    const sum = (key) => queues.reduce((total, q) => total + (Number(q[key]) || 0), 0);
    const queueTotals = { pending: sum('pending'), scheduled: sum('scheduled'), claimed: sum('claimed'), dead: sum('dead'), completed: sum('completed') };
    const cards = h('div', { class: 'cards' },
      countsCard('Runs', '/runs', data.runs, RUN_STATUSES, (s) => `/runs?status=${enc(s)}`, 'overview-runs'),
      countsCard('Queue items', '/queues', queueTotals, Object.keys(queueTotals), null, 'overview-queues-total',
        queueTotals.pending + queueTotals.scheduled + queueTotals.claimed + queueTotals.dead, `in ${plural(queues.length, 'queue')}`),
      countsCard('Processes', '/processes?status=any', data.processes, ['running', 'waiting', 'completed', 'failed', 'cancelled'], null, 'overview-processes'),
      countsCard('Workflow executions', '/workflows', data.workflows, WORKFLOW_STATUSES, (s) => `/workflows?status=${enc(s)}`, 'overview-workflows'));
    const samples = listOf(data.samples);
    const last = samples[samples.length - 1];
    const chartCard = h('div', { class: 'card wide' },
      h('div', { class: 'card-head' },
        h('h2', null, 'Queues over the last minutes'),
        h('span', { class: 'legend' },
          h('span', { class: 'swatch depth' }), `depth${last ? ` ${last.depth}` : ''}`,
          h('span', { class: 'swatch rate' }), `completed / min${last ? ` ${formatRate(last.completed_per_min)}` : ''}`)),
      chart(samples));

    const shown = [...queues].sort((a, b) => activity(b) - activity(a) || String(a.queue).localeCompare(String(b.queue))).slice(0, 8);
    const queueRows = h('tbody', null, rowsOr(shown.map((q) => h('tr', { data: { queue: q.queue } },
      td(h('a', { href: `/queues/${enc(q.queue)}`, class: 'mono nowrap', text: shortQueue(q.queue), title: q.queue })),
      tdNum(String(q.pending)), tdNum(String(q.scheduled)), tdNum(String(q.claimed)),
      tdNum(q.dead ? h('span', { class: 'danger', text: String(q.dead) }) : '0'))), 5, 'No queues'));
    const failureRows = h('tbody', null, rowsOr(listOf(data.recent_failures).map((run) => {
      const href = `/runs/${enc(run.id)}${run.failed_node ? `?node=${enc(run.failed_node)}` : ''}`;
      return h('tr', { data: { id: run.id } },
        td(h('a', { href, class: 'strong', text: runName(run) })),
        td(run.failed_node ? h('span', { class: 'mono', text: run.failed_node }) : dash()),
        td(timeEl(run.finished_at_ms ?? run.created_at_ms)),
        td(idEl(run.id, href)));
    }), 4, 'No failed runs'));
    const lower = h('div', { class: 'two-cols' },
      h('div', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Busiest queues'), h('a', { href: '/queues', class: 'small', text: 'all queues →' })),
        table('overview-queues', ['Queue', ['Pending', 'num'], ['Scheduled', 'num'], ['Running', 'num'], ['Dead', 'num']], queueRows)),
      h('div', { class: 'card' }, h('div', { class: 'card-head' }, h('h2', null, 'Recent failed runs'), h('a', { href: '/runs?status=failed', class: 'small', text: 'all failed runs →' })),
        table('recent-failures', ['Run', 'Failed node', 'Finished', 'Id'], failureRows)));
    return [cards, chartCard, lower];
  }

  /** A queue's name, a run's queue (`run:<uuid>`) shortened like the run's id. */
  function shortQueue(name) {
    const text = String(name);
    return text.startsWith('run:') ? `run:${shortId(text.slice(4))}` : truncate(text, 40);
  }

  function activity(q) {
    return (q.dead || 0) * 4 + (q.pending || 0) + (q.scheduled || 0) + (q.claimed || 0) * 2;
  }

  function runName(run) {
    return typeof run.name === 'string' && run.name ? run.name : '(unnamed)';
  }

  function formatRate(rate) {
    const n = Number(rate) || 0;
    return n >= 100 ? String(Math.round(n)) : String(Math.round(n * 10) / 10);
  }

  function countsCard(title, href, counts, order, linkOf, testid, totalShown, footnote) {
    const entries = Object.entries(counts && typeof counts === 'object' ? counts : {});
    entries.sort((a, b) => {
      const ia = order.indexOf(a[0]);
      const ib = order.indexOf(b[0]);
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib);
    });
    const total = totalShown ?? entries.reduce((n, [, v]) => n + (Number(v) || 0), 0);
    const list = h('ul', { class: 'counts' }, entries.length ? entries.map(([status, n]) => h('li', null,
      linkOf ? h('a', { href: linkOf(status) }, badge(status)) : badge(status),
      h('span', { class: 'count', text: String(n) }))) : h('li', { class: 'muted', text: 'none' }),
    footnote ? h('li', { class: 'muted small', text: footnote }) : null);
    return h('div', { class: 'card', testid },
      h('div', { class: 'card-head' }, h('h2', null, h('a', { href, text: title })),
        h('span', { class: 'total', title: totalShown === undefined ? 'in all' : 'not completed', text: String(total) })),
      list);
  }

  function niceMax(value) {
    if (value <= 1) return 1;
    const power = 10 ** Math.floor(Math.log10(value));
    for (const step of [1, 2, 2.5, 5, 10]) if (step * power >= value) return step * power;
    return 10 * power;
  }

  /** Queue depth (area, left axis) and completions per minute (line, right axis). */
  function chart(samples) {
    if (samples.length < 2) {
      return h('p', { class: 'muted chart-empty', testid: 'overview-chart', text: 'Collecting samples: one every 5 s since spindle ui started.' });
    }
    const W = 760;
    const H = 170;
    const L = 44;
    const R = 48;
    const T = 10;
    const B = 24;
    const t0 = samples[0].at_ms;
    const t1 = samples[samples.length - 1].at_ms;
    const maxDepth = niceMax(Math.max(...samples.map((s) => Number(s.depth) || 0)));
    const maxRate = niceMax(Math.max(...samples.map((s) => Number(s.completed_per_min) || 0)));
    const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - R);
    const yDepth = (v) => T + (1 - (Number(v) || 0) / maxDepth) * (H - T - B);
    const yRate = (v) => T + (1 - (Number(v) || 0) / maxRate) * (H - T - B);
    const round = (n) => Math.round(n * 10) / 10;
    const depthLine = samples.map((s, i) => `${i ? 'L' : 'M'}${round(x(s.at_ms))},${round(yDepth(s.depth))}`).join('');
    const area = `${depthLine}L${round(x(t1))},${H - B}L${round(x(t0))},${H - B}Z`;
    const rateLine = samples.map((s, i) => `${i ? 'L' : 'M'}${round(x(s.at_ms))},${round(yRate(s.completed_per_min))}`).join('');
    const svg = sv('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'data-testid': 'overview-chart', 'aria-label': 'Queue depth and completions per minute' });
    for (const f of [0, 0.5, 1]) {
      const y = T + f * (H - T - B);
      svg.appendChild(sv('line', { class: 'grid', x1: L, x2: W - R, y1: y, y2: y }));
      svg.appendChild(svText({ class: 'axis', x: L - 6, y: y + 4, 'text-anchor': 'end' }, formatRate(maxDepth * (1 - f))));
      svg.appendChild(svText({ class: 'axis rate', x: W - R + 6, y: y + 4 }, formatRate(maxRate * (1 - f))));
    }
    const minutes = Math.max(1, Math.round((t1 - t0) / 60000));
    svg.appendChild(svText({ class: 'axis', x: L, y: H - 6 }, `${minutes} min ago`));
    svg.appendChild(svText({ class: 'axis', x: W - R, y: H - 6, 'text-anchor': 'end' }, 'now'));
    svg.appendChild(sv('path', { class: 'depth-area', d: area }));
    svg.appendChild(sv('path', { class: 'depth-line', d: depthLine }));
    svg.appendChild(sv('path', { class: 'rate-line', d: rateLine }));
    return svg;
  }

  // ------------------------------------------------------------------------------------------
  // Runs

  function countsBar(counts) {
    const c = counts && typeof counts === 'object' ? counts : {};
    const total = NODE_STATUSES.reduce((n, s) => n + (Number(c[s]) || 0), 0);
    const done = (Number(c.complete) || 0) + (Number(c.failed) || 0) + (Number(c.skipped) || 0);
    const title = NODE_STATUSES.filter((s) => c[s]).map((s) => `${s} ${c[s]}`).join(' · ') || 'no nodes';
    const bar = h('span', { class: 'bar', title });
    for (const s of ['complete', 'failed', 'skipped', 'running', 'ready', 'pending']) {
      if (!c[s]) continue;
      bar.appendChild(h('span', { class: `seg st-${s}`, style: { width: `${(100 * c[s]) / total}%` } }));
    }
    return h('span', { class: 'counts-cell', title }, bar, h('span', { class: 'small', text: `${done}/${total}` }),
      c.failed ? h('span', { class: 'small danger', text: ` ${c.failed} failed` }) : null);
  }

  function runDuration(run) {
    if (run.duration_ms !== null && run.duration_ms !== undefined) return duration(run.duration_ms);
    if (run.started_at_ms && !RUN_DONE.has(run.status)) return `${duration(Date.now() - run.started_at_ms)}…`;
    return '—';
  }

  function runRow(run) {
    const href = `/runs/${enc(run.id)}`;
    return h('tr', { data: { id: run.id, status: run.status } },
      td(h('a', { href, class: 'strong', text: runName(run) })),
      td(badge(run.status)),
      td(timeEl(run.started_at_ms ?? run.created_at_ms)),
      tdNum(runDuration(run)),
      td(countsBar(run.counts)),
      td(run.failed_node ? h('a', { href: `${href}?node=${enc(run.failed_node)}`, class: 'mono', text: run.failed_node }) : dash()),
      td(idEl(run.id, href)));
  }

  async function runsPage(cx, main) {
    const params = urlParams();
    let shown = '';
    const load = await listPage(cx, main, {
      title: 'Runs',
      form: { testid: 'runs-filters' },
      fields: [
        ['Status', 'status', statusSelect(RUN_STATUSES, params, 'runs-status')],
        ['Name', 'name', searchInput(params.get('name') ?? '', 'pipeline name', 'runs-name', 'Pipeline name')],
      ],
      path: '/api/runs',
      testid: 'runs-table',
      headers: ['Pipeline', 'Status', 'Started', ['Duration', 'num'], 'Nodes', 'Failed node', 'Run'],
      draw(items, body) {
        const text = JSON.stringify(items);
        if (text !== shown || items.some((r) => !RUN_DONE.has(r.status))) {
          shown = text;
          body.replaceChildren(...rowsOr(items.map(runRow), 7, 'No runs match'));
        }
      },
    });
    // The first page follows new runs; later pages stay as they are.
    cx.every(() => { if (!urlParams().get('after')) return load(); return null; }, 4000);
  }

  // ------------------------------------------------------------------------------------------
  // A run's graph

  const NODE_ICONS = { pending: '○', ready: '◌', running: '●', complete: '✓', failed: '✕', skipped: '↷' };
  const BIG_GRAPH = 1500;
  const NODE_H = 34;

  function conditionOf(condition) {
    if (condition === null || condition === undefined) return { text: 'any', cls: 'any' };
    if (typeof condition === 'string') return { text: condition, cls: condition === 'ok' || condition === 'error' ? condition : 'named' };
    if (condition.type === 'ok') return { text: 'ok', cls: 'ok' };
    if (condition.type === 'error') return { text: 'error', cls: 'error' };
    if (condition.type === 'named') return { text: String(condition.name ?? 'named'), cls: 'named' };
    if (condition.named !== undefined) return { text: String(condition.named?.name ?? condition.named), cls: 'named' };
    return { text: JSON.stringify(condition), cls: 'named' };
  }

  /** A path through points, smoothed like d3's curveBasis. */
  function basisPath(points) {
    const r = (n) => Math.round(n * 10) / 10;
    let d = '';
    let x0 = 0;
    let y0 = 0;
    let x1 = 0;
    let y1 = 0;
    let n = 0;
    const curve = (x, y) => {
      d += `C${r((2 * x0 + x1) / 3)},${r((2 * y0 + y1) / 3)},${r((x0 + 2 * x1) / 3)},${r((y0 + 2 * y1) / 3)},${r((x0 + 4 * x1 + x) / 6)},${r((y0 + 4 * y1 + y) / 6)}`;
    };
    for (const { x, y } of points) {
      if (n === 0) {
        d += `M${r(x)},${r(y)}`;
        n = 1;
      } else if (n === 1) {
        n = 2;
      } else {
        if (n === 2) d += `L${r((5 * x0 + x1) / 6)},${r((5 * y0 + y1) / 6)}`;
        n = 3;
        curve(x, y);
      }
      x0 = x1; x1 = x; y0 = y1; y1 = y;
    }
    if (n === 3) curve(x1, y1);
    if (n >= 2) d += `L${r(x1)},${r(y1)}`;
    return d;
  }

  function nodeSize(node, big) {
    const label = truncate(String(node.id), 32);
    const fires = !big && node.fires > 1 ? 22 : 0;
    return { w: Math.min(280, Math.max(70, Math.round(label.length * 7.2) + 38 + fires)), h: NODE_H, label };
  }

  function dagreLayout(nodes, edges, sizes, labels, ranker) {
    const g = new window.dagre.graphlib.Graph({ multigraph: true });
    g.setGraph({ rankdir: 'LR', nodesep: 16, ranksep: 54, edgesep: 10, marginx: 24, marginy: 24, ranker });
    g.setDefaultEdgeLabel(() => ({}));
    for (const node of nodes) {
      const size = sizes.get(node.id);
      g.setNode(node.id, { width: size.w, height: size.h });
    }
    for (const edge of edges) {
      if (!g.hasNode(edge.from) || !g.hasNode(edge.to)) continue;
      const label = labels.get(edge.seq);
      g.setEdge(edge.from, edge.to, { width: label ? label.w : 0, height: label ? 16 : 0, labelpos: 'c' }, String(edge.seq));
    }
    window.dagre.layout(g);
    const pos = new Map();
    for (const node of nodes) {
      const n = g.node(node.id);
      pos.set(node.id, { x: n.x, y: n.y, w: n.width, h: n.height });
    }
    const paths = new Map();
    for (const edge of edges) {
      if (!g.hasNode(edge.from) || !g.hasNode(edge.to)) continue;
      const e = g.edge({ v: edge.from, w: edge.to, name: String(edge.seq) });
      if (e?.points) paths.set(edge.seq, { points: e.points, label: Number.isFinite(e.x) ? { x: e.x, y: e.y } : null });
    }
    const graph = g.graph();
    const finite = (n) => (Number.isFinite(n) && n > 0 ? n : 100);
    return { pos, paths, width: finite(graph.width), height: finite(graph.height) };
  }

  /** Each node's rank, the longest path to it from a source (nodes on a cycle keep the rank
   * their ranked predecessors give them), in creation order; and how many ranks the edges span
   * in all (what a layered layout adds as dummy nodes). */
  function ranksOf(nodes, edges) {
    const count = nodes.length;
    const index = new Map(nodes.map((n, i) => [n.id, i]));
    const order = nodes.map((_, i) => i).sort((a, b) => (nodes[a].created_at_ms - nodes[b].created_at_ms) || a - b);
    const out = nodes.map(() => []);
    const indegree = new Int32Array(count);
    for (const edge of edges) {
      const a = index.get(edge.from);
      const b = index.get(edge.to);
      if (a === undefined || b === undefined || a === b) continue;
      out[a].push(b);
      indegree[b] += 1;
    }
    const rank = new Int32Array(count);
    const queue = order.filter((i) => indegree[i] === 0);
    for (let at = 0; at < queue.length; at += 1) {
      const a = queue[at];
      for (const b of out[a]) {
        if (rank[a] + 1 > rank[b]) rank[b] = rank[a] + 1;
        indegree[b] -= 1;
        if (indegree[b] === 0) queue.push(b);
      }
    }
    let span = 0;
    for (let a = 0; a < count; a += 1) for (const b of out[a]) span += Math.max(1, Math.abs(rank[b] - rank[a]));
    return { rank, order, span };
  }

  /** dagre's work grows with the nodes plus the dummy nodes of edges spanning several ranks,
   * and faster than linearly: past this budget (or BIG_GRAPH nodes) the graph is drawn in
   * layers instead; past the first, with dagre's quicker ranker. */
  const DAGRE_BUDGET = 3200;
  const DAGRE_SIMPLEX_BUDGET = 1000;

  /** For big graphs: rank = longest path from the sources, order within a rank by creation. */
  function layeredLayout(nodes, edges, sizes, ranks) {
    const { rank, order } = ranks ?? ranksOf(nodes, edges);
    const columns = [];
    for (const i of order) (columns[rank[i]] ??= []).push(i);
    const GAP_X = 72;
    const GAP_Y = 10;
    const heights = [];
    let tallest = 0;
    for (let r = 0; r < columns.length; r += 1) {
      const column = columns[r] ?? [];
      heights[r] = column.length * (NODE_H + GAP_Y) - GAP_Y;
      if (heights[r] > tallest) tallest = heights[r];
    }
    const pos = new Map();
    let x = 24;
    for (let r = 0; r < columns.length; r += 1) {
      const column = columns[r] ?? [];
      let widest = 0;
      const top = 24 + (tallest - heights[r]) / 2;
      column.forEach((i, j) => {
        const size = sizes.get(nodes[i].id);
        if (size.w > widest) widest = size.w;
        pos.set(nodes[i].id, { x: x + size.w / 2, y: top + j * (NODE_H + GAP_Y) + NODE_H / 2, w: size.w, h: NODE_H });
      });
      x += widest + GAP_X;
    }
    const paths = new Map();
    for (const edge of edges) {
      const a = pos.get(edge.from);
      const b = pos.get(edge.to);
      if (!a || !b) continue;
      let points;
      if (edge.from === edge.to) {
        points = [{ x: a.x + a.w / 2, y: a.y }, { x: a.x + a.w / 2 + 16, y: a.y - 24 }, { x: a.x, y: a.y - 30 }, { x: a.x, y: a.y - a.h / 2 }];
      } else if (b.x > a.x) {
        const p1 = { x: a.x + a.w / 2, y: a.y };
        const p2 = { x: b.x - b.w / 2, y: b.y };
        const dx = Math.min(GAP_X / 2, (p2.x - p1.x) / 2);
        points = [p1, { x: p1.x + dx, y: p1.y }, { x: p2.x - dx, y: p2.y }, p2];
      } else {
        const over = Math.min(a.y, b.y) - NODE_H;
        const p1 = { x: a.x + a.w / 2, y: a.y };
        const p2 = { x: b.x - b.w / 2, y: b.y };
        points = [p1, { x: p1.x + 30, y: over }, { x: p2.x - 30, y: over }, p2];
      }
      const mid = points.length === 4 ? { x: (points[1].x + points[2].x) / 2, y: (points[1].y + points[2].y) / 2 } : null;
      paths.set(edge.seq, { points, label: mid });
    }
    return { pos, paths, width: x + 24, height: tallest + 48 };
  }

  function arrowDefs() {
    const defs = sv('defs');
    for (const name of ['arrow', 'arrow-taken', 'arrow-error', 'arrow-skip']) {
      defs.appendChild(sv('marker', {
        id: name, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7,
        orient: 'auto-start-reverse', markerUnits: 'userSpaceOnUse',
      }, sv('path', { d: 'M0,0L10,5L0,10z', class: `marker ${name}` })));
    }
    return defs;
  }

  async function graphPage(cx, main, runId) {
    main.classList.add('full');
    const head = h('div', { class: 'run-head', testid: 'run-head' });
    const state = liveBadge();
    const note = h('span', { class: 'small danger', testid: 'graph-note' });
    const svg = sv('svg', { class: 'graph', 'data-testid': 'graph', role: 'img', 'aria-label': 'The run as a graph' });
    const viewport = sv('g', { class: 'viewport' });
    const edgesLayer = sv('g', { class: 'edges' });
    const nodesLayer = sv('g', { class: 'nodes' });
    viewport.append(edgesLayer, nodesLayer);
    svg.append(arrowDefs(), viewport);
    const panel = h('aside', { class: 'node-panel', testid: 'node-panel', hidden: true, 'aria-label': 'Node' });
    const controls = h('div', { class: 'graph-controls' },
      button('+', () => zoomBy(1.25), { title: 'Zoom in', testid: 'graph-zoom-in' }),
      button('−', () => zoomBy(0.8), { title: 'Zoom out', testid: 'graph-zoom-out' }),
      button('Fit', () => { view.touched = false; fit(); }, { title: 'Fit the graph in view', testid: 'graph-fit' }));
    const legend = h('div', { class: 'graph-legend', testid: 'graph-legend' },
      NODE_STATUSES.map((s) => h('span', { class: 'legend-item' }, h('span', { class: `legend-node st-${s}` }), s)),
      h('span', { class: 'legend-item' }, h('span', { class: 'legend-edge skip' }), 'skipped path'));
    const canvas = h('div', { class: 'graph-canvas' }, svg, controls, legend);
    main.append(head, h('div', { class: 'graph-area' }, canvas, panel));

    let data;
    try {
      data = await api(`/api/runs/${enc(runId)}`);
    } catch (error) {
      if (!cx.alive) return;
      main.classList.remove('full');
      main.replaceChildren(crumbs('/runs', 'Runs', h('span', { class: 'mono', text: runId })), errorPanel(error));
      return;
    }
    if (!cx.alive) return;

    const view = { k: 1, tx: 0, ty: 0, width: 0, height: 0, big: false, firstSource: null };
    const drawn = { key: '', nodes: new Map(), edges: new Map(), statuses: new Map() };
    let selected = null;
    let selectedEl = null;
    let panelSig = '';
    let panelLoading = null;
    let panelGeneration = 0;
    /** Attempts of the selected node read on demand, before those its view shows: `from`
     * (the place of the first), `until` (of the first the view showed then). */
    let panelEarlier = null;

    // --- pan and zoom
    const applyView = () => viewport.setAttribute('transform', `translate(${Math.round(view.tx * 10) / 10},${Math.round(view.ty * 10) / 10}) scale(${Math.round(view.k * 10000) / 10000})`);
    function zoomAt(factor, px, py) {
      view.touched = true;
      const k = Math.min(4, Math.max(0.02, view.k * factor));
      view.tx = px - ((px - view.tx) * k) / view.k;
      view.ty = py - ((py - view.ty) * k) / view.k;
      view.k = k;
      applyView();
    }
    function zoomBy(factor) {
      const box = svg.getBoundingClientRect();
      zoomAt(factor, box.width / 2, box.height / 2);
    }
    /** Fits the drawing in view, beside the node panel when it is open. */
    function fit() {
      const whole = svg.getBoundingClientRect();
      if (!whole.width || !whole.height || !view.width) return;
      const covered = panel.hidden ? 0 : panel.getBoundingClientRect().width + 8;
      const box = { width: Math.max(whole.width / 3, whole.width - covered), height: whole.height };
      let k = Math.min(box.width / view.width, box.height / view.height, 1.4) * 0.96;
      if (view.big && k < 0.25 && view.firstSource) {
        k = 0.6;
        view.k = k;
        view.tx = 16;
        view.ty = box.height / 2 - view.firstSource.y * k;
      } else {
        view.k = k;
        view.tx = (box.width - view.width * k) / 2;
        view.ty = (box.height - view.height * k) / 2;
      }
      applyView();
    }
    svg.addEventListener('wheel', (event) => {
      event.preventDefault();
      const box = svg.getBoundingClientRect();
      const delta = event.deltaMode === 1 ? event.deltaY * 16 : event.deltaY;
      zoomAt(Math.exp(-delta * 0.0015), event.clientX - box.left, event.clientY - box.top);
    }, { passive: false });
    let drag = null;
    svg.addEventListener('pointerdown', (event) => {
      if (event.button !== 0) return;
      const node = event.target instanceof Element ? event.target.closest('g.node') : null;
      drag = { x: event.clientX, y: event.clientY, tx: view.tx, ty: view.ty, moved: false, node, pointer: event.pointerId };
    });
    svg.addEventListener('pointermove', (event) => {
      if (!drag) return;
      const dx = event.clientX - drag.x;
      const dy = event.clientY - drag.y;
      if (!drag.moved && Math.hypot(dx, dy) > 4) {
        drag.moved = true;
        try { svg.setPointerCapture(drag.pointer); } catch { /* gone */ }
        svg.classList.add('dragging');
      }
      if (drag.moved) {
        view.touched = true;
        view.tx = drag.tx + dx;
        view.ty = drag.ty + dy;
        applyView();
      }
    });
    const endDrag = () => {
      const ended = drag;
      drag = null;
      svg.classList.remove('dragging');
      if (ended && !ended.moved && ended.node) selectNode(ended.node.getAttribute('data-node'));
    };
    svg.addEventListener('pointerup', endDrag);
    svg.addEventListener('pointercancel', () => { drag = null; svg.classList.remove('dragging'); });
    svg.addEventListener('dblclick', (event) => {
      if (event.target instanceof Element && event.target.closest('g.node')) return;
      view.touched = false;
      fit();
    });
    svg.addEventListener('keydown', (event) => {
      const node = event.target instanceof Element ? event.target.closest('g.node') : null;
      if (node && (event.key === 'Enter' || event.key === ' ')) {
        event.preventDefault();
        selectNode(node.getAttribute('data-node'));
      }
    });
    cx.listen(document, 'keydown', (event) => { if (event.key === 'Escape' && selected && !document.querySelector('dialog[open]')) closePanel(); });

    // --- drawing
    function edgeLook(edge) {
      const from = drawn.statuses.get(edge.from);
      const to = drawn.statuses.get(edge.to);
      const cond = conditionOf(edge.condition);
      const skip = from === 'skipped' || to === 'skipped';
      const taken = Number(edge.tokens) > 0;
      const cls = `edge cond-${cond.cls}${taken ? ' taken' : ''}${skip ? ' skip' : ''}`;
      const marker = skip ? 'arrow-skip' : cond.cls === 'error' ? 'arrow-error' : taken ? 'arrow-taken' : 'arrow';
      return { cls, marker };
    }

    function build(d) {
      const nodes = listOf(d.nodes);
      const edges = listOf(d.edges);
      const ranks = ranksOf(nodes, edges);
      const cost = nodes.length + ranks.span;
      view.big = nodes.length > BIG_GRAPH || cost > DAGRE_BUDGET || !window.dagre;
      svg.classList.toggle('big', view.big);
      const sizes = new Map(nodes.map((n) => [n.id, nodeSize(n, view.big)]));
      const labels = new Map();
      for (const edge of edges) {
        const cond = conditionOf(edge.condition);
        if (view.big && cond.cls === 'ok') continue;
        const text = truncate(cond.text, 24);
        labels.set(edge.seq, { text, cls: cond.cls, w: text.length * 6 + 12 });
      }
      let layout;
      try {
        layout = view.big
          ? layeredLayout(nodes, edges, sizes, ranks)
          : dagreLayout(nodes, edges, sizes, labels, cost > DAGRE_SIMPLEX_BUDGET ? 'tight-tree' : 'network-simplex');
      } catch (error) {
        note.textContent = `layout: ${error.message}; drawn in layers instead`;
        layout = layeredLayout(nodes, edges, sizes, ranks);
      }
      view.width = layout.width;
      view.height = layout.height;
      drawn.nodes.clear();
      drawn.edges.clear();
      drawn.statuses.clear();
      for (const n of nodes) drawn.statuses.set(n.id, n.status);

      const edgeFragment = document.createDocumentFragment();
      for (const edge of edges) {
        const route = layout.paths.get(edge.seq);
        if (!route) continue;
        const look = edgeLook(edge);
        const g = sv('g', { class: look.cls, 'data-edge': edge.seq, 'data-from': edge.from, 'data-to': edge.to });
        const path = sv('path', { d: basisPath(route.points), 'marker-end': `url(#${look.marker})` });
        g.appendChild(path);
        const label = labels.get(edge.seq);
        if (label && route.label) {
          const lg = sv('g', { class: `elabel ${label.cls}`, transform: `translate(${Math.round(route.label.x)},${Math.round(route.label.y)})` });
          lg.appendChild(sv('rect', { x: -label.w / 2, y: -8, width: label.w, height: 16, rx: 4 }));
          lg.appendChild(svText({ x: 0, y: 0, 'text-anchor': 'middle' }, label.text));
          g.appendChild(lg);
        }
        edgeFragment.appendChild(g);
        drawn.edges.set(edge.seq, { edge, g, path });
      }
      const nodeFragment = document.createDocumentFragment();
      view.firstSource = null;
      for (const n of nodes) {
        const p = layout.pos.get(n.id);
        if (!p) continue;
        if (!view.firstSource) view.firstSource = p;
        const size = sizes.get(n.id);
        const kind = n.spec?.type ?? 'task';
        const g = sv('g', {
          class: `node kind-${String(kind).replace(/[^a-z_]/g, '')}`,
          'data-node': n.id,
          'data-status': n.status,
          transform: `translate(${Math.round(p.x - p.w / 2)},${Math.round(p.y - p.h / 2)})`,
          tabindex: view.big ? null : 0,
        });
        const rect = sv('rect', { width: p.w, height: p.h, rx: kind === 'gather' ? p.h / 2 : 7 });
        let icon = null;
        let fires = null;
        let title = null;
        if (view.big) {
          // Past a few thousand nodes every text run costs: the label alone, status by colour.
          g.append(rect, svText({ class: 'label', x: 12, y: p.h / 2 }, size.label));
        } else {
          icon = svText({ class: 'icon', x: 14, y: p.h / 2, 'text-anchor': 'middle' }, NODE_ICONS[n.status] ?? '·');
          fires = svText({ class: 'fires', x: p.w - 8, y: p.h / 2, 'text-anchor': 'end' }, n.fires > 1 ? `×${n.fires}` : '');
          title = sv('title');
          title.textContent = nodeTitle(n);
          g.append(title, rect, icon, svText({ class: 'label', x: 26, y: p.h / 2 }, size.label), fires);
        }
        if (n.id === selected) {
          g.classList.add('selected');
          selectedEl = g;
        }
        nodeFragment.appendChild(g);
        drawn.nodes.set(n.id, { node: n, g, icon, fires, title });
      }
      edgesLayer.replaceChildren(edgeFragment);
      nodesLayer.replaceChildren(nodeFragment);
      if (!nodes.length) {
        nodesLayer.appendChild(svText({ class: 'empty-graph', x: 24, y: 40 }, 'This run has no nodes (yet).'));
        view.width = 400;
        view.height = 80;
      }
    }

    function nodeTitle(n) {
      const parts = [`${n.id}: ${n.status}`];
      if (n.fires > 1) parts.push(`fired ${n.fires} times`);
      if (n.error) parts.push(truncate(String(n.error).split('\n')[0], 160));
      return parts.join(' · ');
    }

    /** Recolours nodes and edges in place: no layout, pan and zoom and selection kept. */
    function recolour(d) {
      for (const n of d.nodes) {
        drawn.statuses.set(n.id, n.status);
        const item = drawn.nodes.get(n.id);
        if (!item) continue;
        if (item.g.getAttribute('data-status') !== n.status) {
          item.g.setAttribute('data-status', n.status);
          if (item.icon) item.icon.textContent = NODE_ICONS[n.status] ?? '·';
        }
        if (item.fires) {
          const fires = n.fires > 1 ? `×${n.fires}` : '';
          if (item.fires.textContent !== fires) item.fires.textContent = fires;
        }
        if (item.title) {
          const title = nodeTitle(n);
          if (item.title.textContent !== title) item.title.textContent = title;
        }
        item.node = n;
      }
      for (const edge of d.edges) {
        const item = drawn.edges.get(edge.seq);
        if (!item) continue;
        const look = edgeLook(edge);
        if (item.g.getAttribute('class') !== look.cls) item.g.setAttribute('class', look.cls);
        const marker = `url(#${look.marker})`;
        if (item.path.getAttribute('marker-end') !== marker) item.path.setAttribute('marker-end', marker);
        item.edge = edge;
      }
    }

    function structureKey(d) {
      return `${d.nodes.map((n) => n.id).join('\u0000')}\u0001${d.edges.map((e) => `${e.seq}:${e.from}>${e.to}`).join('\u0000')}`;
    }

    function drawHead(d) {
      const run = d.run ?? {};
      const counts = run.counts ?? {};
      head.replaceChildren(
        crumbs('/runs', 'Runs', h('a', { href: `/runs${query({ name: typeof run.name === 'string' ? run.name : null })}`, text: runName(run) })),
        h('div', { class: 'run-title' },
          h('h1', null, runName(run)), badge(run.status), state, note,
          h('span', { class: 'spacer' }),
          h('a', { href: `/events${query({ stream: `graph:${run.id ?? runId}` })}`, class: 'small', text: 'events' }),
          h('a', { href: `/events${query({ stream: `custom:log:${run.id ?? runId}` })}`, class: 'small', title: 'Each attempt of a node as it starts and ends; a node\'s panel links to its output', text: 'attempts' })),
        h('div', { class: 'run-meta' },
          h('span', null, 'run ', h('span', { class: 'mono', title: run.id, text: run.id ?? runId })),
          h('span', null, 'started ', timeEl(run.started_at_ms ?? run.created_at_ms)),
          run.finished_at_ms ? h('span', null, 'finished ', timeEl(run.finished_at_ms)) : null,
          h('span', null, 'duration ', h('strong', { testid: 'run-duration', text: runDuration(run) })),
          h('span', { class: 'node-counts' }, NODE_STATUSES.filter((s) => counts[s]).map((s) => h('span', { class: 'count-chip' }, badge(s), ` ${counts[s]}`))),
          run.failed_node ? h('span', null, 'failed at ', h('a', { href: `?node=${enc(run.failed_node)}`, class: 'mono', text: run.failed_node, on: { click: (e) => { e.preventDefault(); e.stopPropagation(); selectNode(run.failed_node); } } })) : null,
          view.big ? h('span', { class: 'muted', title: 'Too big for a full layout in the page: ranked by longest path, ordered by creation', text: `${d.nodes.length} nodes, drawn in plain layers` }) : null));
    }

    function update(d) {
      d.nodes = listOf(d.nodes);
      d.edges = listOf(d.edges);
      data = d;
      const key = structureKey(d);
      if (key !== drawn.key) {
        drawn.key = key;
        build(d);
      } else {
        recolour(d);
      }
      drawHead(d);
      if (selected) {
        const node = d.nodes.find((n) => n.id === selected);
        const sig = node ? `${node.status}|${node.updated_at_ms}|${node.fires}` : '';
        if (sig !== panelSig) loadPanel(false);
      }
    }

    // --- the side panel
    function setSelectedClass() {
      if (selectedEl) selectedEl.classList.remove('selected');
      selectedEl = selected ? drawn.nodes.get(selected)?.g ?? null : null;
      if (selectedEl) selectedEl.classList.add('selected');
    }

    /** Pans so that the selected node is not under the panel (which lies over the graph). */
    function reveal(id) {
      const item = drawn.nodes.get(id);
      if (!item) return;
      const box = svg.getBoundingClientRect();
      const node = item.g.getBoundingClientRect();
      const free = box.width - (panel.hidden ? 0 : panel.getBoundingClientRect().width) - 16;
      const left = node.left - box.left;
      const top = node.top - box.top;
      let dx = 0;
      let dy = 0;
      if (left + node.width > free) dx = free - node.width - left - 24;
      if (left + dx < 16) dx = 16 - left;
      if (top < 16) dy = 16 - top;
      else if (top + node.height > box.height - 16) dy = box.height - 16 - node.height - top;
      if (dx || dy) {
        view.tx += dx;
        view.ty += dy;
        applyView();
      }
    }

    function selectNode(id) {
      if (!id) return;
      selected = id;
      setSelectedClass();
      setParams({ node: id });
      panel.hidden = false;
      panel.replaceChildren(panelHead(id), h('p', { class: 'muted', text: 'Loading…' }));
      panelSig = '';
      if (view.touched) reveal(id);
      else fit();
      loadPanel(true);
    }

    function closePanel() {
      selected = null;
      panelSig = '';
      panel.hidden = true;
      panel.replaceChildren();
      setSelectedClass();
      setParams({ node: null });
      if (!view.touched) fit();
    }

    function panelHead(id) {
      return h('div', { class: 'panel-head' },
        h('h2', { class: 'mono', title: id, text: id }),
        button('×', closePanel, { class: 'btn btn-icon', title: 'Close (Esc)', 'aria-label': 'Close', testid: 'node-panel-close' }));
    }

    /** Reads the selected node (fresh: just selected; else a refresh, skipped while one for
     * the same node is under way) and draws the panel, keeping what was open and scrolled. */
    async function loadPanel(fresh) {
      const id = selected;
      if (!id || (!fresh && panelLoading === id)) return;
      panelLoading = id;
      const mine = ++panelGeneration;
      let d;
      try {
        d = await api(`/api/runs/${enc(runId)}/nodes/${enc(id)}`);
      } catch (error) {
        if (cx.alive && selected === id && mine === panelGeneration) panel.replaceChildren(panelHead(id), errorPanel(error));
        return;
      } finally {
        if (mine === panelGeneration) panelLoading = null;
      }
      if (!cx.alive || selected !== id || mine !== panelGeneration) return;
      if (fresh || panelEarlier?.id !== id || (d.attempts_from ?? 0) !== panelEarlier.until) panelEarlier = null;
      const node = d.node ?? {};
      panelSig = `${node.status}|${node.updated_at_ms}|${node.fires}`;
      const open = fresh ? null : new Set([...panel.querySelectorAll('details[open]')].map((el) => el.dataset.key));
      const scroll = panel.scrollTop;
      panel.replaceChildren(panelHead(id), ...panelBody(d, open));
      panel.scrollTop = fresh ? 0 : scroll;
    }

    /** Reads the attempts of the selected node before the `before`th, and draws them above
     * those shown. */
    async function loadEarlier(before) {
      const id = selected;
      let e;
      try {
        e = await api(`/api/runs/${enc(runId)}/nodes/${enc(id)}${query({ attempts_before: before })}`);
      } catch (error) {
        notify(error.message, 'error');
        return;
      }
      if (!cx.alive || selected !== id) return;
      const kept = panelEarlier?.id === id ? panelEarlier : { id, attempts: [], until: before };
      panelEarlier = { id, attempts: [...listOf(e.attempts), ...kept.attempts], from: e.attempts_from ?? 0, until: kept.until };
      loadPanel(false);
    }

    function panelBody(d, open) {
      const n = d.node ?? {};
      const spec = n.spec ?? {};
      const task = spec.data && typeof spec.data === 'object' ? spec.data : {};
      const started = n.started_at_ms;
      const finished = n.finished_at_ms;
      const running = n.status === 'running';
      const facts = [
        ['Status', badge(n.status)],
        ['Kind', `${spec.type ?? '?'}${n.join && n.join !== 'all' ? ` · join ${n.join}` : ''}`],
        ['Fires', String(n.fires ?? 0)],
        ['Created', timeEl(n.created_at_ms)],
        ['Started', timeEl(started)],
        ['Finished', timeEl(finished)],
        ['Duration', started ? (finished ? duration(finished - started) : running ? `${duration(Date.now() - started)} so far` : '—') : '—'],
      ];
      if (task.retries) facts.push(['Retries', String(task.retries)]);
      if (task.timeout_s) facts.push(['Timeout', `${task.timeout_s} s`]);
      if (task.matrix && typeof task.matrix === 'object') facts.push(['Matrix', Object.entries(task.matrix).map(([k, v]) => `${k} = ${v}`).join(', ') || JSON.stringify(task.matrix)]);
      if (spec.type === 'gather' && spec.strategy) facts.push(['Gathers', spec.strategy.type === 'first' ? `first ${spec.strategy.n}` : 'all']);
      if (spec.type === 'sub_graph' && spec.graph_id) facts.push(['Child graph', idEl(spec.graph_id, `/runs/${enc(spec.graph_id)}`)]);
      const out = [h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', { text: k }), h('dd', null, v)]))];
      if (typeof task.run === 'string') out.push(section('Command', pre(task.run, 'command', 'node-command')));
      if (typeof d.log_stream === 'string') out.push(h('p', null, h('a', { href: `/events${query({ stream: d.log_stream })}`, class: 'small', testid: 'node-live-log', text: 'live output' })));
      if (n.error) out.push(section('Error', pre(String(n.error), 'error', 'node-error')));
      if (n.output !== null && n.output !== undefined) {
        const text = n.output?.data?.output;
        const kids = [];
        if (typeof text === 'string') kids.push(pre(text || '(no output)', 'output', 'node-output'));
        const key = 'output-json';
        kids.push(h('details', { data: { key }, open: open ? open.has(key) : typeof text !== 'string' },
          h('summary', null, 'Output as JSON'), pre(pretty(n.output), 'json', 'node-output-json')));
        out.push(section('Output', ...kids));
      }
      // The view shows a node's latest attempts; earlier ones are read on demand.
      const earlier = panelEarlier?.id === selected ? panelEarlier : null;
      const attempts = [...(earlier ? earlier.attempts : []), ...listOf(d.attempts)];
      const from = earlier ? earlier.from : (d.attempts_from ?? 0);
      if (attempts.length) {
        const more = from > 0
          ? button(`Show ${plural(Math.min(from, 10), 'earlier attempt')}${from > 10 ? ` (of ${from})` : ''}`, () => loadEarlier(from), { class: 'btn btn-small', testid: 'node-attempts-earlier' })
          : null;
        out.push(section(`Attempts (${d.attempts_total ?? attempts.length})`, more, h('div', { class: 'attempts', testid: 'node-attempts' }, attempts.map((a, i) => {
          const key = `attempt-${from + i}`;
          const isOpen = open ? open.has(key) : i === attempts.length - 1;
          return h('details', { class: 'attempt', data: { key }, open: isOpen },
            h('summary', null, h('strong', { text: `#${a.try}` }), ' ',
              a.ended ? h('span', { class: /^exit 0$/.test(a.ended) ? 'ok-text' : 'danger', text: a.ended }) : h('span', { class: 'running-text', text: 'running…' })),
            pre(a.log || '(nothing printed)', 'log'));
        }))));
      } else if (running) {
        out.push(h('p', { class: 'muted', text: 'Nothing printed yet.' }));
      }
      return out;
    }

    // --- first draw, then live
    update(data);
    requestAnimationFrame(() => { if (cx.alive) fit(); });
    cx.listen(window, 'resize', debounce(() => { if (cx.alive && !view.touched) fit(); }, 200));
    const wanted = urlParams().get('node');
    if (wanted) selectNode(wanted);

    let fetching = false;
    let again = false;
    let timer = null;
    cx.on(() => clearTimeout(timer));
    async function refresh() {
      if (fetching) { again = true; return; }
      fetching = true;
      try {
        const d = await api(`/api/runs/${enc(runId)}`);
        if (!cx.alive) return;
        note.textContent = '';
        update(d);
        if (RUN_DONE.has(d.run?.status) && connection) {
          connection.close();
          connection = null;
          state.set('finished');
        }
      } catch (error) {
        if (cx.alive) note.textContent = `could not refresh: ${error.message}`;
      } finally {
        fetching = false;
        if (again && cx.alive) { again = false; schedule(200); }
      }
    }
    function schedule(ms = 200) {
      if (timer) return;
      timer = setTimeout(() => { timer = null; refresh(); }, ms);
    }
    let connection = null;
    if (!RUN_DONE.has(data.run?.status)) {
      // A big run's JSON is megabytes: read it less often.
      connection = live(cx, `graph:${data.run?.id ?? runId}`, {
        onEvent: () => schedule(view.big ? 1500 : 200),
        onOpen: () => schedule(0),
        onPoll: () => refresh(),
        pollMs: view.big ? 5000 : 2000,
        onState: (s) => state.set(s),
      });
    }
    // A live run's duration grows.
    cx.every(() => {
      const el = head.querySelector('[data-testid=run-duration]');
      if (el && data?.run && !RUN_DONE.has(data.run.status)) el.textContent = runDuration(data.run);
    }, 1000);
    // The selected node's output grows while it runs.
    cx.every(() => {
      if (!selected) return;
      const item = drawn.nodes.get(selected);
      if (item && (item.node.status === 'running' || item.node.status === 'ready')) loadPanel(false);
    }, 2000);
  }

  // ------------------------------------------------------------------------------------------
  // Queues

  async function queuesPage(cx, main) {
    const body = h('tbody');
    const problem = h('div');
    let showAllRuns = false;
    const toggle = button('', () => { showAllRuns = !showAllRuns; load(); }, { class: 'btn btn-small', testid: 'queues-toggle-runs', hidden: true });
    main.append(pageHead('Queues', h('span', { class: 'muted small', text: 'every 5 s' })), problem,
      table('queues-table', ['Queue', ['Pending', 'num'], ['Scheduled', 'num'], ['Running', 'num'], ['Dead', 'num'], ['Completed', 'num'], ['Oldest pending', 'num']], body),
      h('div', { class: 'pager' }, toggle));
    const load = () => read(cx, problem, api('/api/queues'), (answer) => {
      const queues = listOf(answer);
      const isRun = (q) => String(q.queue).startsWith('run:');
      const plain = queues.filter((q) => !isRun(q)).sort((a, b) => String(a.queue).localeCompare(String(b.queue)));
      const runs = queues.filter(isRun).sort((a, b) => activity(b) - activity(a) || String(b.queue).localeCompare(String(a.queue)));
      const RUNS_SHOWN = 10;
      const runsShown = showAllRuns ? runs : runs.slice(0, RUNS_SHOWN);
      toggle.hidden = runs.length <= RUNS_SHOWN;
      toggle.textContent = showAllRuns ? 'Show fewer run queues' : `Show all ${runs.length} run queues`;
      const rows = [...plain, ...runsShown].map((q) => {
        const runId = isRun(q) ? String(q.queue).slice(4) : null;
        return h('tr', { data: { queue: q.queue } },
          td(h('a', { href: `/queues/${enc(q.queue)}`, class: 'mono strong', title: q.queue, text: truncate(String(q.queue), 60) }),
            runId ? [' ', h('a', { href: `/runs/${enc(runId)}`, class: 'small', text: 'run →' })] : null,
            queueState(q)),
          tdNum(String(q.pending)), tdNum(String(q.scheduled)), tdNum(String(q.claimed)),
          tdNum(q.dead ? h('a', { href: `/queues/${enc(q.queue)}`, class: 'danger strong', text: String(q.dead) }) : '0'),
          tdNum(String(q.completed)),
          tdNum(duration(q.oldest_pending_age_ms)));
      });
      body.replaceChildren(...rowsOr(rows, 7, 'No queues yet'));
    });
    await load();
    cx.every(load, 5000);
  }

  /** The periodic jobs, a page at a time: each schedule's cadence, queue, catch-up and ticks. */
  async function schedulesPage(cx, main) {
    await listPage(cx, main, {
      title: 'Schedules',
      fields: [],
      path: '/api/schedules',
      testid: 'schedules-table',
      headers: ['Schedule', 'Cadence', 'Queue', 'Catch-up', 'Next tick', 'Last tick', 'Payload'],
      draw(items, body) {
        const rows = items.map((s) => h('tr', { data: { schedule: s.name } },
          td(h('span', { class: 'mono strong', text: s.name })),
          td(h('span', { class: 'mono', testid: 'schedule-cadence', text: cadenceText(s.cadence) })),
          td(h('a', { href: `/queues/${enc(s.queue)}`, class: 'mono', text: truncate(String(s.queue), 60), title: s.queue })),
          td(String(s.catch_up)),
          td(s.next_tick_ms === null ? dash() : timeEl(s.next_tick_ms)),
          td(s.last_tick_ms === null ? dash() : timeEl(s.last_tick_ms)),
          td(compactJson(s.payload, 80))));
        body.replaceChildren(...rowsOr(rows, 7, 'No schedules (spindle queue schedules put NAME --queue Q --cron EXPR)'));
      },
    });
  }

  /** `cron "0 3 * * *" (Europe/Paris)` or `every 15m`. */
  function cadenceText(cadence) {
    if (cadence && cadence.cron !== undefined) return `cron "${cadence.cron}" (${cadence.time_zone})`;
    if (cadence && cadence.every_ms !== undefined) return `every ${duration(cadence.every_ms)}`;
    return '?';
  }

  /** A queue's controls as badges: paused, and its concurrency limit (null when it has neither). */
  function queueState(q) {
    const parts = [];
    if (q.paused) parts.push(badge('paused', 'Paused: nobody claims its items until it is resumed'));
    if (q.concurrency_max !== null && q.concurrency_max !== undefined) {
      parts.push(h('span', { class: 'badge', testid: 'queue-limit', title: 'At most this many of its items claimed at once, by every worker together', text: `limit ${q.concurrency_max}` }));
    }
    return parts.length ? h('span', { class: 'queue-state', testid: 'queue-state' }, ...parts.flatMap((p) => [' ', p])) : null;
  }

  /** A queue item's cells: its id and payload come first in every table (`cells` gives the
   * rest). */
  const attemptCell = (item) => tdNum(`${item.attempt}/${item.max_attempts}`);
  const lastErrorCell = (item, max) => td(item.last_error ? h('span', { class: 'error-text', title: item.last_error, text: truncate(String(item.last_error), max) }) : dash());

  const ITEM_KINDS = {
    dead: {
      title: 'Dead letters', testid: 'dead-table',
      headers: ['Item', 'Payload', ['Attempts', 'num'], 'Last error', 'Updated'],
      cells: (item) => [attemptCell(item), lastErrorCell(item, 140), td(timeEl(item.updated_at_ms))],
      empty: 'No dead letters',
    },
    pending: {
      title: 'Pending (due now)', testid: 'pending-table',
      headers: ['Item', 'Payload', ['Priority', 'num'], ['Attempt', 'num'], 'Created'],
      cells: (item) => [tdNum(String(item.priority)), attemptCell(item), td(timeEl(item.created_at_ms))],
      empty: 'Nothing pending',
    },
    scheduled: {
      title: 'Scheduled (due later)', testid: 'scheduled-table',
      headers: ['Item', 'Payload', 'Runs at', ['Attempt', 'num'], 'Last error'],
      cells: (item) => [td(timeEl(item.run_at_ms), h('span', { class: 'muted small', text: ` ${relTime(item.run_at_ms)}` })),
        attemptCell(item), lastErrorCell(item, 100)],
      empty: 'Nothing scheduled',
    },
    claimed: {
      title: 'Running (claimed)', testid: 'claimed-table',
      headers: ['Item', 'Payload', 'Worker', ['Attempt', 'num'], 'Lease expires'],
      cells: (item) => [td(h('span', { class: 'mono', text: item.worker_id ?? '—' })), attemptCell(item),
        td(timeEl(item.lease_expires_at_ms),
          item.lease_expires_at_ms && item.lease_expires_at_ms < Date.now() ? h('span', { class: 'small muted', text: ' lapsed' }) : null)],
      empty: 'Nothing running',
    },
  };

  async function queuePage(cx, main, name) {
    const base = `/api/queues/${enc(name)}`;
    const stats = h('div', { class: 'queue-stats', testid: 'queue-stats' });
    const liveState = liveBadge();
    const requeueAll = button('Requeue all', async () => {
      const done = await act(`${base}/requeue-all`, 'requeue dead letters');
      if (done) { notify(`Requeued ${plural(done.requeued ?? 0, 'dead letter')}`); reloadAll(); }
    }, { testid: 'requeue-all' });
    const purge = button('Purge dead', async () => {
      if (!ensureSignedIn('purge dead letters')) return;
      const sure = await confirmBox(`Purge the dead letters of ${name}?`, 'They are deleted for good; this cannot be undone.', 'Purge');
      if (!sure || !cx.alive) return;
      const done = await act(`${base}/purge`, 'purge dead letters');
      if (done) { notify(`Purged ${plural(done.purged ?? 0, 'dead letter')}`); reloadAll(); }
    }, { class: 'btn btn-danger', testid: 'purge-dead' });
    // Pause or resume: the button says what it will do, from the stats' last reading.
    let paused = false;
    const pauseToggle = button('Pause', async () => {
      const verb = paused ? 'resume' : 'pause';
      const done = await act(`${base}/${verb}`, `${verb} the queue`);
      if (done) { notify(done.paused ? `Paused ${name}: nobody claims its items` : `Resumed ${name}`); loadStats(); }
    }, { testid: 'queue-pause' });
    const actionBar = h('div', { class: 'actions', testid: 'queue-actions' }, pauseToggle, requeueAll, purge);
    // A run's queue is the run's own: the server refuses actions on its items.
    const ownedByRun = name.startsWith('run:');
    const showActions = () => { actionBar.hidden = !session?.actions || ownedByRun; };
    showActions();
    cx.listen(window, 'spindle:session', showActions);
    main.append(
      crumbs('/queues', 'Queues', h('span', { class: 'mono', text: name })),
      pageHead(h('span', null, 'Queue ', h('span', { class: 'mono', text: name })), liveState, h('span', { class: 'spacer' }), actionBar),
      stats);
    if (ownedByRun) {
      stats.after(h('p', { class: 'small', testid: 'run-queue-note' }, 'The queue of a pipeline run: ', h('a', { href: `/runs/${enc(name.slice(4))}`, text: 'see the run →' }),
        ' A run\'s items are the run\'s: ', h('code', { text: `spindle retry ${name.slice(4)}` }), ' runs its failed nodes again.'));
    }

    // A tag and a metadata condition (KEY=VALUE, VALUE read as JSON if it parses, else as
    // text, as `spindle queue items --meta` reads it) narrow the live items' tables (pending,
    // scheduled, running) to the items with them.
    let tag = '';
    let meta = '';
    const tagInput = searchInput('', 'tag', 'queue-tag', 'Only the live items with this tag', { size: 16 });
    const metaInput = searchInput('', 'key=value', 'queue-meta', 'Only the live items whose metadata has this key=value (the value as JSON, else as text)', { size: 20, maxlength: 1200 });
    const applyFilter = debounce(() => { tag = tagInput.value.trim(); meta = metaInput.value.trim(); reloadAll(); }, 300);
    cx.listen(tagInput, 'input', applyFilter);
    cx.listen(metaInput, 'input', applyFilter);
    main.appendChild(h('p', { class: 'small' }, 'Live items with the tag ', tagInput, ' and the metadata ', metaInput));
    const filterQuery = () => `${tag ? `&tag=${enc(tag)}` : ''}${meta ? `&meta=${enc(meta)}` : ''}`;
    const sections = {};
    for (const kind of Object.keys(ITEM_KINDS)) {
      const path = kind === 'dead' ? () => `${base}/dead` : () => `${base}/items?status=${kind}${filterQuery()}`;
      sections[kind] = itemSection(cx, kind, path, name);
      main.appendChild(sections[kind].el);
    }

    // The stats are drawn anew at every read, or replaced by what went wrong.
    const loadStats = () => read(cx, stats, api('/api/queues'), (answer) => {
      const q = listOf(answer).find((x) => x.queue === name);
      requeueAll.disabled = Boolean(q) && !q.dead;
      purge.disabled = Boolean(q) && !q.dead;
      paused = Boolean(q?.paused);
      pauseToggle.textContent = paused ? 'Resume' : 'Pause';
      if (!q) {
        stats.replaceChildren(h('span', { class: 'muted', text: 'This queue has no items (yet).' }));
        return;
      }
      // replaceChildren writes a null as the text "null": only the parts there are.
      stats.replaceChildren(...[['pending', q.pending], ['scheduled', q.scheduled], ['running', q.claimed], ['dead', q.dead], ['completed', q.completed]]
        .map(([label, n]) => h('span', { class: `stat${label === 'dead' && n ? ' danger' : ''}` }, h('strong', { text: String(n) }), ` ${label}`)),
      ...[queueState(q),
        q.oldest_pending_age_ms !== null && q.oldest_pending_age_ms !== undefined ? h('span', { class: 'stat muted', text: `oldest pending ${duration(q.oldest_pending_age_ms)}` }) : null].filter(Boolean));
    });

    function reloadAll() {
      loadStats();
      for (const s of Object.values(sections)) s.reload();
    }
    const later = debounce(() => { if (cx.alive) reloadAll(); }, 600);
    cx.on(later.cancel);
    cx.listen(window, 'spindle:queue-changed', () => loadStats());
    await Promise.all([loadStats(), ...Object.values(sections).map((s) => s.reload())]);
    if (!cx.alive) return;
    live(cx, `queue:${name}`, { onEvent: later, onPoll: reloadAll, pollMs: 5000, onState: (s) => liveState.set(s) });
  }

  /** One table of a queue's items, read by keyset pages ("Load more"), with its row actions. */
  function itemSection(cx, kind, path, queueName) {
    const spec = ITEM_KINDS[kind];
    const body = h('tbody');
    const problem = h('div');
    const more = button('Load more', () => load(true), { class: 'btn btn-small', testid: `${kind}-more`, hidden: true });
    const count = h('span', { class: 'muted small' });
    const withActions = (kind === 'dead' || kind === 'pending' || kind === 'scheduled' || kind === 'claimed') && !queueName.startsWith('run:');
    const headers = withActions ? [...spec.headers, ['', 'actions-col']] : spec.headers;
    const el = h('section', { class: 'section', testid: `${kind}-section` },
      h('div', { class: 'section-head' }, h('h2', null, spec.title), count),
      problem, table(spec.testid, headers, body), h('div', { class: 'pager' }, more));
    let next = null;
    let shown = 0;

    /** A row's button: the action (`what` for the sign-in prompt), then the queue's tables again. */
    function rowAction(item, label, testid, path, what, doneText) {
      return h('td', { class: 'actions-col' }, button(label, async (event) => {
        const target = event.currentTarget;
        target.disabled = true;
        const done = await act(`/api/queues/${enc(queueName)}/${path}`, what);
        target.disabled = false;
        if (done) {
          notify(`${doneText} ${shortId(item.id)}`);
          window.dispatchEvent(new Event('spindle:queue-changed'));
        }
      }, { class: 'btn btn-small', testid }));
    }

    function rowActions(item) {
      if (!session?.actions) return td();
      return kind === 'dead'
        ? rowAction(item, 'Requeue', 'requeue', `dead/${enc(item.id)}/requeue`, 'requeue dead letters', 'Requeued')
        : rowAction(item, 'Cancel', 'cancel', `items/${enc(item.id)}/cancel`, 'cancel items', 'Cancelled');
    }

    let generation = 0;
    async function load(append) {
      const mine = ++generation;
      const after = append ? next : null;
      const url = path();
      const sep = url.includes('?') ? '&' : '?';
      await read(cx, problem, api(`${url}${sep}limit=50${after ? `&after=${enc(after)}` : ''}`), (page) => {
        const tags = (item) => listOf(item.tags).map((t) => [' ', h('span', { class: 'badge', text: t, title: 'tag' })]);
        const rows = listOf(page.items).map((item) => h('tr', { data: { id: item.id } },
          td(idEl(item.id), ...tags(item)), td(compactJson(item.payload, 80)), ...spec.cells(item), withActions ? rowActions(item) : null));
        if (append) {
          body.querySelector('tr.empty')?.remove();
          body.append(...rows);
          shown += rows.length;
        } else {
          body.replaceChildren(...rowsOr(rows, headers.length, spec.empty));
          shown = rows.length;
        }
        next = page.next ?? null;
        more.hidden = !next;
        count.textContent = next ? `first ${shown}` : plural(shown, 'item');
      }, {
        current: () => mine === generation,
        failed: () => {
          if (!append) body.replaceChildren();
          more.hidden = true;
        },
      });
    }
    const redraw = () => load(false);
    cx.listen(window, 'spindle:queue-changed', redraw);
    cx.listen(window, 'spindle:session', redraw);
    return { el, reload: redraw };
  }

  // ------------------------------------------------------------------------------------------
  // Processes

  function processStatus(p) {
    const state = p.status && typeof p.status === 'object' ? p.status.state : p.status;
    if (state === 'running' && p.wait) {
      const kind = p.wait.kind ?? {};
      const what = kind.kind === 'signal' ? `signal ${kind.name}` : (kind.kind ?? 'something');
      return h('span', null, badge('waiting', `waiting for ${what}`), h('span', { class: 'small muted', text: ` ${what}` }));
    }
    return badge(state ?? 'unknown');
  }

  function processRow(proc) {
    const identity = proc.identity ?? {};
    const origin = proc.originator ?? {};
    const output = proc.status && typeof proc.status === 'object' ? proc.status.await_output : null;
    return h('tr', { data: { id: proc.id } },
      td(idEl(proc.id, `/events${query({ stream: `process:${proc.id}` })}`)),
      td(h('span', { text: identity.kind ?? '—' }), identity.label ? h('span', { class: 'muted small', text: ` ${identity.label}` }) : null),
      td(processStatus(proc)),
      td(origin.type === 'session' ? h('span', { class: 'mono small', title: JSON.stringify(origin.scope), text: `session ${origin.scope?.session_id ?? ''}` }) : (origin.type ?? '—')),
      td(compactJson(proc.input, 60), output !== null && output !== undefined ? h('div', { class: 'small' }, '→ ', compactJson(output, 60)) : null),
      td(timeEl(proc.created_at_ms)),
      td(timeEl(proc.updated_at_ms)),
      td(proc.external_ref ? h('span', { class: 'mono small', title: JSON.stringify(proc.external_ref), text: `${proc.external_ref.backend}:${proc.external_ref.id}` }) : dash()));
  }

  async function processesPage(cx, main) {
    const anyStatus = (p) => p.get('status') === 'any';
    const status = select([['running', 'running'], ['any', 'any status']], anyStatus(urlParams()) ? 'any' : 'running', { testid: 'processes-status', 'aria-label': 'Status' });
    await listPage(cx, main, {
      title: 'Processes',
      fields: [['Status', 'status', status, (value) => (value === 'running' ? null : value)]],
      path: '/api/processes',
      params: (p) => ({ status: anyStatus(p) ? 'any' : 'running' }),
      testid: 'processes-table',
      headers: ['Process', 'Kind', 'Status', 'Started by', 'Input / output', 'Created', 'Updated', 'Elsewhere'],
      draw(items, body, p) {
        body.replaceChildren(...rowsOr(items.map(processRow), 8, anyStatus(p) ? 'No processes' : 'No running processes'));
      },
    });
  }

  // ------------------------------------------------------------------------------------------
  // Workflows

  function workflowRow(ex) {
    return h('tr', { data: { id: ex.id, status: ex.status } },
      td(idEl(ex.id, `/workflows/${enc(ex.id)}`)),
      td(h('a', { href: `/workflows${query({ workflow: ex.workflow_id })}`, text: ex.workflow_id }), h('span', { class: 'muted small', text: ` ${ex.workflow_version}` })),
      td(badge(ex.status)),
      tdNum(String(ex.state_version)),
      td(timeEl(ex.created_at_ms)),
      td(timeEl(ex.updated_at_ms)),
      td(timeEl(ex.completed_at_ms)));
  }

  async function workflowsPage(cx, main) {
    const params = urlParams();
    await listPage(cx, main, {
      title: 'Workflow executions',
      fields: [
        ['Status', 'status', statusSelect(WORKFLOW_STATUSES, params, 'workflows-status')],
        ['Workflow', 'workflow', searchInput(params.get('workflow') ?? '', 'workflow id', 'workflows-workflow', 'Workflow')],
      ],
      path: '/api/workflows',
      testid: 'workflows-table',
      headers: ['Execution', 'Workflow', 'Status', ['State version', 'num'], 'Created', 'Updated', 'Completed'],
      draw(items, body) {
        body.replaceChildren(...rowsOr(items.map(workflowRow), 7, 'No workflow executions match'));
      },
    });
  }

  async function workflowPage(cx, main, id) {
    const liveState = liveBadge();
    const body = h('div', { testid: 'workflow' });
    main.append(crumbs('/workflows', 'Workflow executions', h('span', { class: 'mono', text: shortId(id), title: id })), body);
    let first = true;
    async function load() {
      let d;
      try {
        d = await api(`/api/workflows/${enc(id)}`);
      } catch (error) {
        if (cx.alive && first) body.replaceChildren(errorPanel(error));
        else if (cx.alive) notify(`Could not refresh: ${error.message}`, 'error');
        return null;
      }
      if (!cx.alive) return null;
      first = false;
      const open = new Set([...body.querySelectorAll('details[open]')].map((el) => el.dataset.key));
      body.replaceChildren(...workflowView(d, liveState, open));
      return d;
    }
    const d = await load();
    if (!d || WORKFLOW_DONE.has(d.execution?.status)) return;
    let connection = null;
    const refresh = debounce(async () => {
      const again = await load();
      if (again && WORKFLOW_DONE.has(again.execution?.status) && connection) {
        connection.close();
        liveState.set('finished');
      }
    }, 300);
    cx.on(refresh.cancel);
    connection = live(cx, `execution:${id}`, { onEvent: refresh, onPoll: refresh, pollMs: 5000, onState: (s) => liveState.set(s) });
  }

  function workflowView(d, liveState, open) {
    const ex = d.execution ?? {};
    const events = listOf(d.events);
    const snapshot = d.snapshot;
    const facts = [
      ['Workflow', h('a', { href: `/workflows${query({ workflow: ex.workflow_id })}`, text: ex.workflow_id ?? '—' })],
      ['Version', ex.workflow_version ?? '—'],
      ['State version', String(ex.state_version ?? '—')],
      ['Created', timeEl(ex.created_at_ms)],
      ['Updated', timeEl(ex.updated_at_ms)],
      ['Completed', timeEl(ex.completed_at_ms)],
      ['Id', h('span', { class: 'mono', text: ex.id ?? '' })],
    ];
    const eventRows = [...events].reverse().map((ev) => h('tr', { data: { seq: ev.seq } },
      tdNum(String(ev.seq)), td(h('span', { class: 'strong', text: ev.event_type })), td(compactJson(ev.payload, 140)), td(timeEl(ev.created_at_ms))));
    return [
      pageHead(h('span', null, 'Execution ', h('span', { class: 'mono', title: ex.id, text: shortId(ex.id) })), badge(ex.status), liveState,
        h('span', { class: 'spacer' }), h('a', { href: `/events${query({ stream: `execution:${ex.id}` })}`, class: 'small', text: 'follow its events →' })),
      h('div', { class: 'fact-row' }, facts.map(([k, v]) => h('div', { class: 'fact' }, h('div', { class: 'fact-label', text: k }), h('div', { class: 'fact-value' }, v)))),
      h('div', { class: 'two-cols' },
        section('State', pre(pretty(ex.state), 'json', 'workflow-state')),
        section('Input', pre(pretty(ex.input), 'json', 'workflow-input'))),
      section(`Latest snapshot`, h('div', { testid: 'workflow-snapshot' }, snapshot
        ? [h('p', { class: 'small' }, `at event ${snapshot.at_seq} · written `, timeEl(snapshot.created_at_ms)), pre(pretty(snapshot.state), 'json')]
        : h('p', { class: 'muted', text: 'No snapshot' }))),
      section(`Events (${events.length >= 200 ? 'the latest 200' : events.length}, newest first)`,
        table('workflow-events', [['Seq', 'num'], 'Type', 'Payload', 'When'], h('tbody', null, rowsOr(eventRows, 4, 'No events')))),
    ];
  }

  // ------------------------------------------------------------------------------------------
  // Events: the latest of a stream (or of every stream), then live; filter; pause

  const EVENT_ROWS_MAX = 500;

  function streamName(stream) {
    if (!stream || typeof stream !== 'object') return String(stream ?? '');
    return `${stream.kind}:${stream.id}`;
  }

  function streamPage(stream) {
    if (!stream || typeof stream !== 'object') return null;
    const id = String(stream.id);
    if (stream.kind === 'graph') return `/runs/${enc(id)}`;
    if (stream.kind === 'execution') return `/workflows/${enc(id)}`;
    if (stream.kind === 'queue') return `/queues/${enc(id)}`;
    if (stream.kind === 'custom' && /^(log|pipeline):/.test(id)) return `/runs/${enc(id.slice(id.indexOf(':') + 1))}`;
    return null;
  }

  /** The last `count` events, and the cursor a live tail goes on from. */
  async function tailEvents(stream, count) {
    const page = await api(`/api/events${query({ stream, tail: count, limit: count })}`);
    return { items: listOf(page.items), last: Number(page.last ?? 0) };
  }

  async function eventsPage(cx, main) {
    const params = urlParams();
    const stream = (params.get('stream') ?? '').trim();
    const cursorOf = (ev) => Number(stream ? ev.seq : ev.position);
    const streamInput = searchInput(stream, 'KIND:ID (every stream when empty)', 'events-stream', 'Stream', { size: 34 });
    const filterInput = searchInput(params.get('filter') ?? '', 'filter: type, stream or payload text', 'events-filter', 'Filter');
    const liveState = liveBadge();
    const shownInfo = h('span', { class: 'muted small', testid: 'events-count' });
    let paused = false;
    const held = [];
    let dropped = 0;
    const pause = button('Pause', () => {
      paused = !paused;
      if (!paused) {
        for (const ev of held.splice(0)) addRow(ev);
        dropped = 0;
      }
      pauseLabel();
    }, { testid: 'events-pause' });
    const pauseLabel = () => {
      pause.textContent = paused ? `Resume${held.length ? ` (${held.length}${dropped ? '+' : ''} new)` : ''}` : 'Pause';
      pause.classList.toggle('btn-primary', paused);
    };
    const body = h('tbody');
    const problem = h('div');
    const follow = h('form', { class: 'filters', testid: 'events-form', on: { submit: (e) => { e.preventDefault(); navigate(`/events${query({ stream: streamInput.value.trim(), filter: filterInput.value })}`); } } },
      h('label', null, 'Stream ', streamInput), h('button', { type: 'submit', class: 'btn', testid: 'events-follow', text: 'Follow' }),
      h('label', null, 'Filter ', filterInput), pause);
    main.append(pageHead(stream ? h('span', null, 'Events of ', h('span', { class: 'mono', text: stream })) : 'Events', liveState, shownInfo,
      stream && streamPage(parseStream(stream)) ? h('a', { href: streamPage(parseStream(stream)), class: 'small', text: 'open →' }) : null),
    follow, problem,
    table('events-table', [[stream ? 'Seq' : 'Position', 'num'], 'When', 'Stream', 'Type', 'Payload'], body));

    const texts = new WeakMap();
    let needle = filterInput.value.trim().toLowerCase();
    const matches = (row) => !needle || (texts.get(row) ?? '').includes(needle);
    const countShown = () => {
      const rows = body.rows.length;
      let visible = 0;
      for (const row of body.rows) if (!row.hidden) visible += 1;
      shownInfo.textContent = needle ? `${visible} of ${rows} shown` : plural(rows, 'event');
    };
    filterInput.addEventListener('input', debounce(() => {
      needle = filterInput.value.trim().toLowerCase();
      setParams({ filter: filterInput.value.trim() });
      for (const row of body.rows) row.hidden = !matches(row);
      countShown();
    }, 150));

    function eventRow(ev) {
      const name = streamName(ev.stream);
      const page = streamPage(ev.stream);
      const type = String(ev.event_type ?? '');
      const row = h('tr', { data: { position: ev.position, seq: ev.seq } },
        tdNum(h('span', { class: 'mono', title: `position ${ev.position} · seq ${ev.seq}`, text: String(cursorOf(ev)) })),
        td(timeEl(ev.created_at_ms)),
        td(h('a', { href: `/events${query({ stream: name })}`, class: 'mono small', title: name, text: truncate(name, 48) }),
          page ? [' ', h('a', { href: page, class: 'small', title: 'open', text: '↗' })] : null),
        td(h('span', { class: `event-type${/fail|dead|error/.test(type) ? ' danger' : /done|complete/.test(type) ? ' ok-text' : ''}`, text: type })),
        td(compactJson(ev.payload, 160)));
      texts.set(row, `${type} ${name} ${JSON.stringify(ev.payload)}`.toLowerCase());
      row.hidden = !matches(row);
      return row;
    }

    let last = 0;
    function addRow(ev) {
      body.querySelector('tr.empty')?.remove();
      body.prepend(eventRow(ev));
      while (body.rows.length > EVENT_ROWS_MAX) body.lastElementChild.remove();
      countShown();
    }
    function take(ev) {
      const cursor = cursorOf(ev);
      if (!(cursor > last)) return;
      last = cursor;
      if (paused) {
        held.push(ev);
        if (held.length > EVENT_ROWS_MAX) { held.shift(); dropped += 1; }
        pauseLabel();
      } else {
        addRow(ev);
      }
    }

    let polling = false;
    // The latest events, then the live tail from there on.
    await read(cx, problem, tailEvents(stream, 200), (start) => {
      last = start.last;
      body.replaceChildren(...rowsOr(start.items.map(eventRow).reverse(), 5, 'No events yet: new ones appear here as they commit'));
      countShown();
      live(cx, stream || null, {
        after: last,
        onEvent: take,
        onPoll: async () => {
          if (polling) return;
          polling = true;
          try {
            const page = await api(`/api/events${query({ stream, after: last, limit: 500 })}`);
            if (cx.alive) for (const ev of page.items ?? []) take(ev);
          } catch (error) {
            if (cx.alive) problem.replaceChildren(errorPanel(error));
          } finally {
            polling = false;
          }
        },
        pollMs: 5000,
        onState: (s) => liveState.set(s),
      });
    });
  }

  function parseStream(text) {
    const at = text.indexOf(':');
    return at > 0 ? { kind: text.slice(0, at), id: text.slice(at + 1) } : null;
  }

  // ------------------------------------------------------------------------------------------
  // Tenants and tokens (lists only; the store keeps no secret to show)

  async function tenantsPage(cx, main) {
    const tenantsBody = h('tbody');
    const tokensBody = h('tbody');
    const tenantsProblem = h('div');
    const tokensProblem = h('div');
    main.append(pageHead('Tenants and tokens'),
      section('Tenants', tenantsProblem, table('tenants-table', ['Tenant', 'Name', 'Status', 'Created', 'Updated'], tenantsBody)),
      section('API tokens', h('p', { class: 'muted small', text: 'Secrets are shown once, when a token is made (spindle tokens create); the store keeps only their hashes.' }),
        tokensProblem, table('tokens-table', ['Name', 'Role', 'Tenant', 'State', 'Created', 'Expires', 'Last used', 'Id'], tokensBody)));
    await Promise.all([
      read(cx, tenantsProblem, api('/api/tenants'), (tenants) => tenantsBody.replaceChildren(...rowsOr(listOf(tenants).map((t) => h('tr', { data: { id: t.id } },
        td(h('span', { class: 'mono strong', text: t.id })), td(t.name), td(badge(t.status)), td(timeEl(t.created_at_ms || null)), td(timeEl(t.updated_at_ms || null)))), 5, 'No tenants'))),
      read(cx, tokensProblem, api('/api/tokens'), (tokens) => {
        const now = Date.now();
        tokensBody.replaceChildren(...rowsOr(listOf(tokens).map((t) => {
          const state = t.revoked_at_ms ? 'revoked' : t.expires_at_ms && t.expires_at_ms <= now ? 'expired' : 'active';
          return h('tr', { data: { id: t.id } },
            td(h('span', { class: 'strong', text: t.name })), td(badge(t.role)), td(h('span', { class: 'mono', text: t.tenant_id })),
            td(badge(state, t.revoked_at_ms ? `revoked ${fullTime(t.revoked_at_ms)}` : undefined)),
            td(timeEl(t.created_at_ms)), td(t.expires_at_ms ? timeEl(t.expires_at_ms) : h('span', { class: 'muted', text: 'never' })),
            td(timeEl(t.last_used_at_ms)), td(idEl(t.id)));
        }), 8, 'No tokens'));
      }),
    ]);
  }

  // ------------------------------------------------------------------------------------------
  // Start

  window.addEventListener('unhandledrejection', (event) => {
    const reason = event.reason;
    notify(`Something failed: ${reason?.message ?? reason}`, 'error');
  });
  window.addEventListener('error', (event) => {
    if (event.message) notify(`Script error: ${event.message}`, 'error');
  });

  async function start() {
    shell();
    await loadSession();
    render();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
