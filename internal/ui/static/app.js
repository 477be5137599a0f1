// tollgate dashboard: a small single-page app over the JSON API (/api/v1/).
// The URL carries the state: the page and its filters in the hash
// (#/requests?model=…&range=1h), the language in ?lang=. Every word shown
// comes from i18n/<lang>.json through t(); keys are written as
// literals so the Go test can check each one exists in both catalogues.
'use strict';
(() => {
  const LANGS = ['en', 'zh'];
  let M = {}; // the message catalogue in use
  let lang = 'en';

  // t returns the message for key, with {name} replaced from vars. A
  // missing key renders as ⟦key⟧ so tests can catch it.
  function t(key, vars) {
    let s = M[key];
    if (s === undefined) return '⟦' + key + '⟧';
    if (vars) s = s.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? String(vars[k]) : m));
    return s;
  }

  // h builds an element; text is always set as text, never parsed as HTML.
  function h(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : v);
    }
    for (const c of kids.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  // ---- formatting -------------------------------------------------------
  const dash = '—';
  const isNum = (v) => typeof v === 'number' && isFinite(v);
  const fmtMS = (v) => (isNum(v) ? v.toFixed(1) : dash);
  const fmtInt = (v) => (isNum(v) ? Math.round(v).toLocaleString('en-US') : dash);
  const fmtRate = (v) => (isNum(v) ? v.toFixed(1) : dash);
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  // ---- time zone -------------------------------------------------------
  // One zone per page, chosen in the header and carried in the URL
  // (?tz=browser|UTC|store): every time shown and typed is in it. URLs keep
  // instants in UTC, so a drill-down keeps the instant whatever the zone.
  const ZONES = ['browser', 'UTC', 'store'];
  let zoneChoice = 'browser';
  let storeZone = 'UTC'; // the API's report time zone (GET reports)
  const zoneName = () => (zoneChoice === 'UTC' ? 'UTC' : zoneChoice === 'store' ? storeZone : undefined);
  const zoneLabel = () => zoneName() || Intl.DateTimeFormat().resolvedOptions().timeZone || 'local';
  const dtfCache = {};
  // parts is the wall clock of ms in the page's zone.
  function parts(ms) {
    const z = zoneName() || '';
    let f = dtfCache[z];
    if (!f) {
      f = new Intl.DateTimeFormat('en-US', { timeZone: z || undefined, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit' });
      dtfCache[z] = f;
    }
    const o = {};
    for (const p of f.formatToParts(new Date(ms))) o[p.type] = p.value;
    return { y: +o.year, mo: +o.month, d: +o.day, H: +o.hour % 24, M: +o.minute, S: +o.second, ms: ((ms % 1000) + 1000) % 1000 };
  }
  // offsetMin is the zone's offset from UTC at ms, in minutes.
  function offsetMin(ms) {
    const p = parts(ms);
    return Math.round((Date.UTC(p.y, p.mo - 1, p.d, p.H, p.M, p.S) - (ms - p.ms)) / 60000);
  }
  function fmtTime(s) {
    if (!s) return dash;
    const ms = typeof s === 'number' ? s : Date.parse(s);
    if (isNaN(ms)) return s;
    const d = parts(ms);
    return `${d.y}-${pad(d.mo)}-${pad(d.d)} ${pad(d.H)}:${pad(d.M)}:${pad(d.S)}.${pad(d.ms, 3)}`;
  }
  // isoZone is ms as RFC 3339 in the page's zone: what From/Until show.
  function isoZone(ms) {
    const d = parts(ms), off = offsetMin(ms);
    const o = off === 0 ? 'Z' : (off > 0 ? '+' : '-') + pad(Math.floor(Math.abs(off) / 60)) + ':' + pad(Math.abs(off) % 60);
    return `${d.y}-${pad(d.mo)}-${pad(d.d)}T${pad(d.H)}:${pad(d.M)}:${pad(d.S)}${o}`;
  }
  // parseZone reads a typed time: with an offset (or Z) as written,
  // without one as a wall clock in the page's zone. NaN when unreadable.
  function parseZone(v) {
    v = (v || '').trim();
    if (!v) return NaN;
    if (/(Z|[+-]\d\d:?\d\d)$/i.test(v)) return Date.parse(v);
    const m = v.match(/^(\d{4})-(\d\d)-(\d\d)(?:[T ](\d\d):(\d\d)(?::(\d\d))?)?$/);
    if (!m) return NaN;
    const wall = Date.UTC(+m[1], +m[2] - 1, +m[3], +(m[4] || 0), +(m[5] || 0), +(m[6] || 0));
    let ms = wall - offsetMin(wall) * 60000;
    ms = wall - offsetMin(ms) * 60000; // once more across a DST change
    return ms;
  }
  // typedToURL turns a typed From/Until into the UTC instant the URL keeps.
  const typedToURL = (v) => { const ms = parseZone(v); return isNaN(ms) ? (v || '').trim() : iso(ms); };
  const shownFromURL = (v) => { const ms = Date.parse(v || ''); return v && !isNaN(ms) ? isoZone(ms) : v || ''; };
  const fmtCost = (c) => (c && c.currency ? `${c.amount} ${c.currency}` : c && c.nanos ? c.amount : dash);

  // ---- URL state --------------------------------------------------------
  function route() {
    const raw = location.hash.replace(/^#\/?/, '');
    const [path, query] = raw.split('?');
    const parts = path.split('/').map(decodeURIComponent);
    return { page: parts[0] || 'overview', arg: parts.slice(1).join('/'), params: new URLSearchParams(query || '') };
  }
  function href(page, arg, params) {
    let s = '#/' + page;
    if (arg) s += '/' + encodeURIComponent(arg);
    const q = params ? params.toString() : '';
    return q ? s + '?' + q : s;
  }
  function paramsOf(obj) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(obj)) if (v !== '' && v !== null && v !== undefined && v !== false) p.set(k, v === true ? '1' : v);
    return p;
  }

  // ---- API --------------------------------------------------------------
  class APIError extends Error {
    constructor(status, code, message, param) { super(message); this.status = status; this.code = code; this.param = param || ''; }
  }
  // apiErrorText is the catalogue's words for an API error, by its code
  // (and parameter): the server's own message is English, kept in a title.
  function apiErrorText(err) {
    const p = { param: err.param || '', status: err.status || '' };
    switch (err.code) {
      case 'unauthorized': return localStorage.getItem('tollgate.token') ? t('apierr.wrong_token') : t('apierr.unauthorized');
      case 'forbidden': return t('apierr.forbidden');
      case 'not_found': return t('apierr.not_found');
      case 'bad_parameter': case 'bad_filter': return p.param ? t('apierr.bad_parameter', p) : t('apierr.bad_request');
      case 'bad_period': return t('apierr.bad_period');
      case 'bad_limit': return t('apierr.bad_limit');
      case 'store_not_connected': return t('apierr.store_not_connected');
      case 'store_error': return t('apierr.store_error');
      default: return err.status ? t('apierr.generic', p) : t('apierr.network');
    }
  }
  async function api(path) {
    const headers = { Accept: 'application/json' };
    const tok = localStorage.getItem('tollgate.token');
    if (tok) headers.Authorization = 'Bearer ' + tok;
    const resp = await fetch('/api/v1/' + path, { headers });
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    if (!resp.ok) {
      const err = (body && body.error) || {};
      let param = err.parameter || '';
      if (!param && /^[a-z_]+: /.test(err.message || '')) param = err.message.split(':')[0];
      throw new APIError(resp.status, err.code || '', err.message || resp.statusText, param);
    }
    return body;
  }
  function errorBox(err) {
    const box = h('div', { class: 'error', 'data-testid': 'error', 'data-code': err.code || '', title: err.message || String(err) }, h('strong', {}, t('error.title')), ' ', apiErrorText(err));
    if (err.status === 401 || err.status === 403) {
      const input = h('input', { type: 'password', placeholder: t('token.placeholder'), 'aria-label': t('token.placeholder') });
      box.append(h('p', {}, t('token.explain')),
        h('form', { onsubmit: (e) => { e.preventDefault(); localStorage.setItem('tollgate.token', input.value.trim()); render(); } },
          input, ' ', h('button', { type: 'submit' }, t('token.save'))));
    }
    return box;
  }

  // ---- tables -----------------------------------------------------------
  // table builds a table from columns [{label, num, cell(row)}] and rows.
  // table builds a table inside its own scroll box: a table wider than
  // its card (a phone, a reconciliation's many columns) scrolls there.
  function table(cols, rows, attrs) {
    return h('div', { class: 'scroll' }, rawTable(cols, rows, attrs));
  }
  function rawTable(cols, rows, attrs) {
    return h('table', attrs || {},
      h('thead', {}, h('tr', {}, cols.map((c) => h('th', { class: c.num ? 'num' : null }, c.label)))),
      h('tbody', {}, rows.map((r) => h('tr', c0(r), cols.map((c) => h('td', { class: c.num ? 'num' : null }, c.cell(r)))))));
  }
  const c0 = (r) => (r && r.request_id ? { 'data-request-id': r.request_id } : {});

  // ---- time range -------------------------------------------------------
  const RANGES = { '15m': 15 * 60e3, '1h': 3600e3, '6h': 6 * 3600e3, '24h': 24 * 3600e3, '7d': 7 * 24 * 3600e3 };
  function rangeLabel(r) {
    switch (r) {
      case '15m': return t('range.15m');
      case '1h': return t('range.1h');
      case '6h': return t('range.6h');
      case '24h': return t('range.24h');
      case '7d': return t('range.7d');
      default: return t('range.custom');
    }
  }

  // ---- Requests ---------------------------------------------------------
  const REQ_FILTERS = ['range', 'since', 'until', 'user', 'biz_line', 'model', 'status', 'trace_id', 'template', 'slow', 'errors', 'limit'];
  // SORTS: the figures a column header sorts by, as the API's sort=
  // names them (largest first; without one, newest first).
  const SORTS = new Set(['ttft', 'e2e', 'input', 'output', 'cost']);
  async function pageRequests(main, params) {
    const get = (k, d = '') => params.get(k) || d;
    const range = get('range', '24h');
    const field = (name, label, extra) => h('label', {}, label, h('input', Object.assign({ name, value: get(name) }, extra || {})));
    const rangeSel = h('select', { name: 'range' }, [...Object.keys(RANGES), 'custom'].map((r) => h('option', { value: r, selected: r === range }, rangeLabel(r))));
    const slowSel = h('select', { name: 'slow' }, ['', '500ms', '1s', '2s', '5s', '10s', '30s'].map((v) =>
      h('option', { value: v, selected: v === get('slow') }, v ? t('requests.slower_than', { d: v }) : t('requests.any_speed'))));
    const form = h('form', { class: 'filters', 'data-testid': 'filters' },
      h('label', {}, t('filter.range'), rangeSel),
      h('label', {}, t('filter.since_zone', { zone: zoneLabel() }), h('input', { name: 'since', value: shownFromURL(get('since')), placeholder: isoZone(Date.now() - 3600e3).slice(0, 16), size: 25 })),
      h('label', {}, t('filter.until_zone', { zone: zoneLabel() }), h('input', { name: 'until', value: shownFromURL(get('until')), placeholder: isoZone(Date.now()).slice(0, 16), size: 25 })),
      field('user', t('filter.user')), field('biz_line', t('filter.biz_line')), field('model', t('filter.model')),
      field('status', t('filter.status'), { size: 5, inputmode: 'numeric' }),
      field('trace_id', t('filter.trace_id'), { size: 34 }), field('template', t('filter.template')),
      h('label', {}, t('filter.slow'), slowSel),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'errors', checked: get('errors') === '1' }), t('filter.errors')),
      field('limit', t('filter.limit'), { size: 5, inputmode: 'numeric', placeholder: '100' }),
      h('button', { type: 'submit' }, t('common.search')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const fd = new FormData(form);
      const o = {};
      for (const k of REQ_FILTERS) o[k] = k === 'errors' ? fd.has('errors') : (fd.get(k) || '').trim();
      o.since = o.since && typedToURL(o.since); o.until = o.until && typedToURL(o.until);
      if ((o.since || o.until) && o.range !== 'custom' && (o.since !== get('since') || o.until !== get('until'))) o.range = 'custom';
      if (o.range !== 'custom') { o.since = ''; o.until = ''; }
      location.hash = href('requests', '', paramsOf(o));
    });
    main.append(h('h1', {}, t('requests.title')),
      h('div', { class: 'card' }, form, h('p', { class: 'hint' }, t('requests.time_hint'))));

    const q = new URLSearchParams();
    for (const k of ['user', 'biz_line', 'model', 'status', 'trace_id', 'template', 'slow']) if (get(k)) q.set(k, get(k));
    if (get('errors') === '1') q.set('errors', '1');
    if (range === 'custom') {
      if (get('since')) q.set('since', get('since'));
      if (get('until')) q.set('until', get('until'));
    } else {
      q.set('since', new Date(Date.now() - (RANGES[range] || RANGES['24h'])).toISOString());
    }
    // Paging: "older" lists the rows before the last one shown (before=,
    // an arrival instant); the browser's back button goes newer again.
    if (get('before')) q.set('until', get('before'));
    // A column header sorts the whole filtered period on the server
    // (sort=), largest first; "more" then raises the limit.
    const sortKey = SORTS.has(get('sort')) ? get('sort') : '';
    if (sortKey) q.set('sort', sortKey);
    const limit = get('limit', '100');
    q.set('limit', limit);
    const out = h('div', { class: 'card' }, h('p', { class: 'muted' }, t('common.loading')));
    main.append(out);
    let data;
    try { data = await api('requests?' + q.toString()); } catch (err) { out.replaceChildren(errorBox(err)); return; }
    const recs = data.requests || [];
    const cols = [
      { label: t('col.arrival'), cell: (r) => fmtTime(r.timing.arrival) },
      { label: t('col.request_id'), cell: (r) => h('a', { href: href('request', r.request_id), 'data-testid': 'request-link' }, r.request_id) },
      { label: t('col.user'), cell: (r) => (r.user_id ? h('a', { href: href('requests', '', paramsOf({ range: range, since: get('since'), until: get('until'), user: r.user_id })), 'data-testid': 'user-link' }, r.user_id) : dash) },
      { label: t('col.biz_line'), cell: (r) => r.biz_line || dash },
      { label: t('col.model'), cell: (r) => r.model },
      { label: t('col.status'), cell: (r) => statusCell(r) },
      { label: sortHead('ttft', t('col.ttft_ms')), num: true, cell: (r) => h('span', { 'data-testid': 'ttft' }, fmtMS(r.timing.ttft_ms)) },
      { label: sortHead('e2e', t('col.e2e_ms')), num: true, cell: (r) => h('span', { 'data-testid': 'e2e' }, fmtMS(r.timing.e2e_ms)) },
      { label: sortHead('input', t('col.input_tokens')), num: true, cell: (r) => h('span', { 'data-testid': 'input-tokens' }, inputTokens(r.usage, r.usage.input_tokens)) },
      { label: sortHead('output', t('col.output_tokens')), num: true, cell: (r) => h('span', { 'data-testid': 'output-tokens' }, fmtInt(r.usage.output_tokens)) },
      { label: sortHead('cost', t('col.cost')), num: true, cell: (r) => fmtCost(r.cost) },
    ];
    const shown = recs;
    const capped = recs.length >= Number(limit);
    const note = capped ? (sortKey ? t('requests.capped_sorted', { n: recs.length }) : t('requests.capped', { n: recs.length })) : t('requests.count', { n: recs.length });
    const more = (p) => { p.set('limit', String(Math.min(Number(limit) * 2, 10000))); return p; };
    const older = !capped ? null : sortKey
      ? (Number(limit) < 10000 ? h('a', { class: 'button', 'data-testid': 'more', href: href('requests', '', more(new URLSearchParams(params))) }, t('requests.more')) : null)
      : h('a', { class: 'button', 'data-testid': 'older', href: href('requests', '', (() => { const p = new URLSearchParams(params); p.set('before', recs[recs.length - 1].timing.arrival); return p; })()) }, t('requests.older'));
    out.replaceChildren(...[h('p', { class: 'muted', 'data-testid': 'count' }, note, get('before') ? ' · ' + t('requests.before', { t: fmtTime(get('before')) }) : ''),
      recs.length ? table(cols, shown, { 'data-testid': 'requests' }) : h('p', { class: 'placeholder' }, t('requests.none')),
      sortKey ? h('p', { class: 'hint' }, t('requests.sort_hint')) : null, older].filter((x) => x));
    function sortHead(k, label) {
      const p = new URLSearchParams(params);
      if (sortKey === k) p.delete('sort'); else p.set('sort', k);
      return h('a', { href: href('requests', '', p), class: 'sort' + (sortKey === k ? ' on' : ''), 'data-testid': 'sort-' + k }, label, sortKey === k ? ' ↓' : '');
    }
  }
  function statusCell(r) {
    const bad = r.status >= 400 || r.error_type;
    return h('span', { class: bad ? 'status-bad' : 'status-ok' }, String(r.status), r.error_type ? ' ' + r.error_type : '');
  }

  // ---- Request ----------------------------------------------------------
  const SEGMENTS = ['gateway_queue', 'connect', 'engine_queue', 'prefill', 'decode', 'post_processing', 'client_write', 'unattributed'];
  function segLabel(s) {
    switch (s) {
      case 'gateway_queue': return t('seg.gateway_queue');
      case 'connect': return t('seg.connect');
      case 'engine_queue': return t('seg.engine_queue');
      case 'prefill': return t('seg.prefill');
      case 'decode': return t('seg.decode');
      case 'post_processing': return t('seg.post_processing');
      case 'client_write': return t('seg.client_write');
      case 'unattributed': return t('seg.unattributed');
      default: return s;
    }
  }
  const MARKS = ['auth_done', 'admitted', 'upstream_sent', 'upstream_headers', 'first_upstream_token', 'first_client_token', 'last_token', 'last_upstream_token', 'end'];
  function markLabel(m) {
    switch (m) {
      case 'auth_done': return t('mark.auth_done');
      case 'admitted': return t('mark.admitted');
      case 'upstream_sent': return t('mark.upstream_sent');
      case 'upstream_headers': return t('mark.upstream_headers');
      case 'first_upstream_token': return t('mark.first_upstream_token');
      case 'first_client_token': return t('mark.first_client_token');
      case 'last_token': return t('mark.last_token');
      case 'last_upstream_token': return t('mark.last_upstream_token');
      case 'end': return t('mark.end');
      default: return m;
    }
  }
  // inputTokens shows an input figure (n) of usage u, or "unknown" when
  // nobody counted the input: its 0 in the JSON is not a count.
  function inputTokens(u, n) {
    return u.input_unknown ? t('usage.unknown') : fmtInt(n);
  }
  // sourceLabel says where a segment's time came from (the server's
  // source string is English: kept as a title).
  function sourceLabel(s) {
    if (!s) return '';
    if (s === 'gateway') return t('src.gateway');
    if (s.startsWith('engine:')) return t('src.engine', { signal: s.slice(7) });
    if (s.startsWith('gateway+inferred:')) return t('src.gateway_inferred');
    if (s.startsWith('inferred:upstream (')) return t('src.upstream_not_split');
    if (s.startsWith('inferred:no token')) return t('src.no_token');
    if (s.startsWith('inferred:upstream TTFT')) return t('src.upstream_ttft');
    if (s.startsWith('inferred:')) return t('src.inferred');
    return s;
  }
  function sourceHelp(s) {
    switch (s) {
      case 'engine': return t('usage.source.engine');
      case 'tokenizer': return t('usage.source.tokenizer');
      case 'merged': return t('usage.source.merged');
      case 'chunks': return t('usage.source.chunks');
      default: return t('usage.source.none');
    }
  }
  const figure = (label, value, unit, id, raw) => h('div', { class: 'figure' }, h('div', { class: 'label' }, label),
    h('div', {}, h('span', { class: 'value', 'data-testid': id || null, 'data-value': raw === undefined || raw === null ? null : String(raw) }, value), unit && value !== dash ? h('span', { class: 'unit' }, unit) : null));
  const kv = (pairs) => h('dl', { class: 'kv' }, pairs.filter((p) => p).map(([k, v]) => [h('dt', {}, k), h('dd', {}, v === '' || v === undefined || v === null ? dash : v)]));

  async function pageRequest(main, id) {
    main.append(h('p', {}, h('a', { href: '#/requests' }, '← ' + t('request.back'))));
    let data;
    try { data = await api('requests/' + encodeURIComponent(id)); } catch (err) { main.append(errorBox(err)); return; }
    const attempts = data.attempts || [];
    const r = attempts.find((a) => a.request_id === id) || attempts[attempts.length - 1];
    if (!r) { main.append(h('p', { class: 'placeholder' }, t('request.none'))); return; }
    const tm = r.timing;
    main.append(h('h1', {}, t('request.title'), ' ', h('code', { 'data-testid': 'request-id' }, r.request_id)));
    main.append(h('div', { class: 'figures card', 'data-testid': 'figures' },
      figure(t('fig.ttft'), fmtMS(tm.ttft_ms), 'ms', 'ttft'),
      figure(t('fig.upstream_ttft'), fmtMS(tm.upstream_ttft_ms), 'ms', 'upstream-ttft'),
      figure(t('fig.queue'), fmtMS(tm.queue_ms), 'ms', 'queue'),
      figure(t('fig.e2e'), fmtMS(tm.e2e_ms), 'ms', 'e2e'),
      figure(t('fig.tpot'), fmtMS(tm.tpot_ms), 'ms', 'tpot'),
      figure(t('fig.decode_rate'), fmtRate(tm.decode_tokens_per_s), t('unit.tokens_per_s'), 'decode-rate'),
      figure(t('fig.output_tokens'), fmtInt(r.usage.output_tokens), '', 'output-tokens'),
      figure(t('fig.status'), statusCell(r), '', 'status')));
    if (tm.first_packet_merge) main.append(h('p', { class: 'hint' }, t('request.first_packet_merge')));

    // Engine timing pending: vLLM exports its span in batches, so for a
    // while after the request its engine figures are still to come (until
    // arrival + engine_timing_due_ms). The server's clock decides.
    const now = data.now ? Date.parse(data.now) : Date.now();
    const due = r.engine_timing_due_ms ? Date.parse(tm.arrival) + r.engine_timing_due_ms : 0;
    const pending = !r.engine_timing && due > now;

    // The waterfall: segments in the order of the request's timeline, each
    // bar placed after the previous one, drawn to the scale of E2E.
    const segs = r.segments || {};
    const total = tm.e2e_ms > 0 ? tm.e2e_ms : SEGMENTS.reduce((a, s) => a + (segs[s] || 0), 0) || 1;
    let at = 0;
    const rows = SEGMENTS.map((s) => {
      const v = segs[s] || 0;
      const left = (at / total) * 100, width = (v / total) * 100;
      at += v;
      const src = (r.segments_source || {})[s] || '';
      return h('div', { class: 'wf-row', 'data-segment': s },
        h('span', {}, segLabel(s)),
        h('div', { class: 'wf-track' }, v > 0 ? h('div', { class: 'wf-bar seg-' + s, style: `left:${left.toFixed(3)}%;width:${width.toFixed(3)}%`, title: `${segLabel(s)} ${fmtMS(v)} ms` }) : null),
        h('span', { class: 'num' }, fmtMS(v) + ' ms'),
        h('span', { class: 'muted', title: src }, pending && src.startsWith('inferred:') ? sourceLabel(src) + ' — ' + t('request.engine_pending_short') : sourceLabel(src)));
    });
    main.append(h('div', { class: 'card', 'data-testid': 'waterfall' }, h('h2', {}, t('request.waterfall')),
      h('p', { class: 'hint' }, t('request.waterfall_hint')),
      pending ? h('p', { class: 'hint', 'data-testid': 'engine-pending' }, t('request.engine_pending', { s: Math.ceil((due - now) / 1000) })) : null,
      rows,
      h('div', { class: 'wf-axis' }, h('span', {}, '0'), h('span', {}, fmtMS(total / 2)), h('span', {}, fmtMS(total) + ' ms'))));

    // Token timeline (sampled requests only).
    const tl = h('div', { class: 'card', 'data-testid': 'timeline' }, h('h2', {}, t('request.timeline')));
    main.append(tl);
    if (r.token_timeline && r.token_timeline.length) {
      tl.append(h('p', { class: 'hint' }, t('request.timeline_hint', { n: r.token_timeline.length })));
      const plot = h('div', { 'data-testid': 'timeline-plot' });
      tl.append(plot);
      drawTimeline(plot, r.token_timeline);
    } else {
      tl.append(h('p', { class: 'muted' }, r.sampled ? t('request.timeline_empty') : t('request.timeline_unsampled')));
    }

    const marks = tm.marks_ms || {};
    main.append(h('div', { class: 'grid2' },
      h('div', { class: 'card', 'data-testid': 'marks' }, h('h2', {}, t('request.marks')), h('p', { class: 'hint' }, t('request.marks_hint')),
        kv([[t('mark.arrival'), fmtTime(tm.arrival)], ...MARKS.map((m) => [markLabel(m), isNum(marks[m]) ? fmtMS(marks[m]) + ' ms' : dash])])),
      h('div', {},
        h('div', { class: 'card', 'data-testid': 'usage' }, h('h2', {}, t('request.usage')),
          kv([[t('usage.input'), h('span', { 'data-testid': 'input-tokens' }, inputTokens(r.usage, r.usage.input_tokens))],
            [t('usage.cached'), inputTokens(r.usage, r.usage.cached_input_tokens)],
            [t('usage.output'), fmtInt(r.usage.output_tokens)], [t('usage.reasoning'), fmtInt(r.usage.reasoning_tokens)],
            [t('usage.total'), inputTokens(r.usage, r.usage.input_tokens + r.usage.output_tokens)],
            [t('usage.source'), h('span', {}, h('code', { 'data-testid': 'usage-source' }, r.usage.source), ' — ', sourceHelp(r.usage.source))]])),
        h('div', { class: 'card', 'data-testid': 'cost' }, h('h2', {}, t('request.cost')),
          kv([[t('cost.amount'), fmtCost(r.cost)], [t('cost.price_version'), r.cost.price_version || t('cost.no_price')]])))));

    main.append(h('div', { class: 'grid2' },
      h('div', { class: 'card', 'data-testid': 'result' }, h('h2', {}, t('request.result')),
        kv([[t('result.status'), String(r.status)], [t('result.upstream_status'), r.upstream_status ? String(r.upstream_status) : dash],
          [t('result.error_type'), r.error_type ? h('code', {}, r.error_type) : ''], [t('result.error_message'), r.error_message ? (lang === 'en' ? r.error_message : h('span', { title: r.error_message }, t('result.see_error_type'))) : ''],
          [t('result.finish_reason'), r.finish_reason ? h('code', {}, r.finish_reason) : ''],
          [t('result.attempt'), String(r.attempt)], [t('result.retries'), String(r.retries)],
          [t('result.stream'), r.stream ? t('common.yes') : t('common.no')],
          [t('result.cache_hit'), r.cache_hit ? t('common.yes') : t('common.no')],
          [t('result.prefix_cache_hit'), r.prefix_cache_hit ? t('common.yes') : t('common.no')]])),
      h('div', { class: 'card', 'data-testid': 'identity' }, h('h2', {}, t('request.identity')),
        kv([[t('id.trace_id'), h('code', { 'data-testid': 'trace-id' }, r.trace_id)], [t('id.logical_request_id'), r.logical_request_id],
          [t('id.user'), r.user_id], [t('id.key_id'), r.key_id], [t('id.biz_line'), r.biz_line], [t('id.team'), r.team],
          [t('id.session'), r.session_id], [t('id.template'), r.template_id], [t('id.endpoint'), r.endpoint ? h('code', {}, r.endpoint) : ''],
          [t('id.model'), r.model], [t('id.served_model'), r.served_model], [t('id.upstream'), r.upstream ? h('code', {}, r.upstream) : ''], [t('id.engine'), r.engine ? h('code', {}, r.engine) : '']]))));

    if (r.engine_timing) {
      const e = r.engine_timing;
      main.append(h('div', { class: 'card', 'data-testid': 'engine' }, h('h2', {}, t('request.engine')),
        kv([[t('engine.signal'), h('code', {}, e.signal)], [t('engine.queue'), fmtMS(e.queue_ms)], [t('engine.ttft'), fmtMS(e.ttft_ms)],
          [t('engine.prefill'), fmtMS(e.prefill_ms)], [t('engine.decode'), fmtMS(e.decode_ms)], [t('engine.e2e'), fmtMS(e.e2e_ms)]])));
    }

    main.append(h('div', { class: 'card', 'data-testid': 'attempts' }, h('h2', {}, t('request.attempts', { n: attempts.length })),
      table([
        { label: t('col.attempt'), num: true, cell: (a) => String(a.attempt) },
        { label: t('col.request_id'), cell: (a) => (a.request_id === r.request_id ? h('strong', {}, a.request_id) : h('a', { href: href('request', a.request_id) }, a.request_id)) },
        { label: t('col.upstream'), cell: (a) => a.upstream },
        { label: t('col.status'), cell: (a) => statusCell(a) },
        { label: t('col.e2e_ms'), num: true, cell: (a) => fmtMS(a.timing.e2e_ms) },
      ], attempts)));
  }

  function drawTimeline(el, points) {
    if (typeof uPlot !== 'function') { el.append(h('p', { class: 'muted' }, t('request.timeline_nochart'))); return; }
    const xs = points.map((p) => p[1]), ys = points.map((p) => p[0] + 1);
    const width = Math.max(200, Math.min(1100, el.parentElement.clientWidth - 32));
    // eslint-disable-next-line no-new
    new uPlot({
      width, height: 240,
      scales: { x: { time: false } },
      axes: [{ label: t('timeline.x') }, { label: t('timeline.y') }],
      series: [{ label: t('timeline.x') }, { label: t('timeline.y'), stroke: '#2457c5', width: 2, points: { show: true, size: 5 } }],
      legend: { show: true },
    }, [xs, ys], el);
  }

  // ---- Cost -------------------------------------------------------------
  function colLabel(name) {
    switch (name) {
      case 'day': return t('col.day');
      case 'month': return t('col.month');
      case 'user': return t('col.user');
      case 'biz_line': return t('col.biz_line');
      case 'requests': return t('col.requests');
      case 'errors': return t('col.errors');
      case 'input_tokens': return t('col.input_tokens');
      case 'cached_input_tokens': return t('col.cached_input_tokens');
      case 'output_tokens': return t('col.output_tokens');
      case 'reasoning_tokens': return t('col.reasoning_tokens');
      case 'tokens': return t('col.tokens');
      case 'token_share': return t('col.token_share');
      case 'cost': return t('col.cost');
      case 'cost_share': return t('col.cost_share');
      case 'currency': return t('col.currency');
      case 'flag': return t('col.flag');
      case 'finding': return t('col.finding');
      case 'subject': return t('col.waste_subject');
      case 'share': return t('col.share');
      case 'est_cost': return t('col.est_cost');
      case 'detail': return t('col.detail');
      case 'model': return t('col.model');
      case 'template': return t('col.template');
      case 'finish_length': return t('col.finish_length');
      case 'length_share': return t('col.length_share');
      case 'prefix_cache': return t('col.prefix_cache');
      case 'segment': return t('col.segment');
      case 'figure': return t('col.figure');
      case 'p50_ms': return 'P50 (ms)';
      case 'p99_ms': return 'P99 (ms)';
      case 'p99_over_p50': return 'P99 / P50';
      case 'cost_per_request': return t('col.cost_per_request');
      case 'avg_input_tokens': return t('col.avg_input_tokens');
      case 'avg_output_tokens': return t('col.avg_output_tokens');
      case 'cache_hit_rate': return t('col.prefix_cache_share');
      case 'ttft_p50_ms': return 'TTFT P50 (ms)';
      case 'ttft_p95_ms': return 'TTFT P95 (ms)';
      case 'ttft_p99_ms': return 'TTFT P99 (ms)';
      case 'e2e_p50_ms': return 'E2E P50 (ms)';
      case 'e2e_p99_ms': return 'E2E P99 (ms)';
      default: return name;
    }
  }
  // wasteKind names a waste finding; wasteDetail says it in the page's
  // language (the server's detail is English, kept as a title).
  function wasteKind(k) {
    switch (k) {
      case 'duplicate_prompt': return t('waste.duplicate_prompt');
      case 'prompt_grew': return t('waste.prompt_grew');
      case 'cut_by_max_tokens': return t('waste.cut_by_max_tokens');
      case 'low_prefix_cache_hits': return t('waste.low_prefix_cache_hits');
      default: return k;
    }
  }
  function wasteDetail(row) {
    switch (row.finding) {
      case 'duplicate_prompt': return t('waste.detail_duplicate_prompt');
      case 'prompt_grew': return t('waste.detail_prompt_grew');
      case 'cut_by_max_tokens': return t('waste.detail_cut_by_max_tokens');
      case 'low_prefix_cache_hits': return t('waste.detail_low_prefix_cache_hits');
      default: return row.detail;
    }
  }
  // valueCell shows a report's text value: names the catalogue knows are
  // translated; data (models, users, templates) is shown as it is.
  function valueCell(name, v, row) {
    if (name === 'finding') return h('span', { title: v }, wasteKind(v));
    if (name === 'flag') return h('span', { title: v, class: 'status-bad' }, t('cost.flag_top'));
    if (name === 'detail' && row.finding) return h('span', { title: v, style: 'white-space:normal' }, wasteDetail(row));
    if (name === 'segment') return segLabel(v);
    if (name === 'prefix_cache') return v === 'hit' ? t('diag.prefix_hit') : v === 'miss' ? t('diag.prefix_miss') : v;
    if (v === '(none)') return t('common.none');
    return v;
  }
  function reportTable(res) {
    if (!res.rows || !res.rows.length) return h('p', { class: 'placeholder' }, t('cost.no_data'));
    const NUM = ['int', 'float', 'money', 'percent'];
    const cols = res.columns.map((c) => ({
      label: colLabel(c.name), num: NUM.includes(c.kind),
      cell: (row) => {
        const v = row[c.name];
        if (c.kind === 'int' && isNum(v)) return fmtInt(v);
        if (c.kind === 'text' && typeof v === 'string' && v !== '') return valueCell(c.name, v, row);
        if (c.kind === 'percent' && isNum(v)) return (v * 100).toFixed(1) + ' %';
        if (c.kind === 'float' && isNum(v)) return v.toFixed(1);
        return v === null || v === undefined || v === '' ? dash : String(v);
      },
    }));
    return table(cols, res.rows);
  }
  // budgetBody renders GET /api/v1/quotas: per scope and daily limit, the
  // day's usage against the quota, highlighted from the warning level on.
  function burnScope(u) {
    switch (u.kind) {
      case 'key': return t('budget.kind_key', { name: u.name });
      case 'user': return t('budget.kind_user', { name: u.name });
      case 'biz_line': return t('budget.kind_biz_line', { name: u.name });
      default: return u.scope;
    }
  }
  const burnAmount = (u, v) => (u.limit === 'daily_cost' ? (v / 1e9).toFixed(2) : fmtInt(v));
  function budgetBody(list) {
    if (!list.length) return h('p', { class: 'placeholder', 'data-testid': 'budget-empty' }, t('budget.none'));
    const rows = list.map((u) => {
      const level = u.share >= 1 ? 'over' : u.share >= (u.warn_at || 0.8) ? 'warn' : 'ok';
      const width = Math.min(Math.max(u.share, 0), 1) * 100;
      return h('tr', { 'data-scope': u.scope, 'data-limit': u.limit, class: 'burn-' + level },
        h('td', {}, burnScope(u), u.default ? h('span', { class: 'muted' }, ' · ' + t('budget.default')) : null),
        h('td', {}, u.limit === 'daily_cost' ? t('budget.daily_cost') : t('budget.daily_tokens')),
        h('td', { class: 'num' }, h('span', { 'data-testid': 'burn-used' }, burnAmount(u, u.used)), ' / ', burnAmount(u, u.quota),
          u.reserved > 0 ? h('span', { class: 'muted' }, ' ' + t('budget.reserved', { n: burnAmount(u, u.reserved) })) : null),
        h('td', { class: 'burn-cell' }, h('div', { class: 'burn-track' }, h('div', { class: 'burn-bar', style: `width:${width.toFixed(1)}%` }))),
        h('td', { class: 'num', 'data-testid': 'burn-share' }, pctCell(u.share)));
    });
    const d = list[0];
    return h('div', {},
      h('p', { class: 'hint' }, t('budget.day', { from: fmtTime(d.day_start).slice(0, 16), to: fmtTime(d.day_end).slice(0, 16) })),
      h('div', { class: 'scroll' }, h('table', { 'data-testid': 'budget-table' },
        h('thead', {}, h('tr', {}, h('th', {}, t('budget.scope')), h('th', {}, t('budget.limit')), h('th', { class: 'num' }, t('budget.used_quota')),
          h('th', {}, t('budget.burn')), h('th', { class: 'num' }, t('budget.share')))),
        h('tbody', {}, rows))));
  }
  // budgetsBody renders GET /api/v1/budgets: each configured budget (day,
  // month or rolling window; user, key, business line or team) with its
  // usage against tokens and cost, and the thresholds that alert.
  function budgetsBody(list) {
    if (!list.length) return h('p', { class: 'placeholder', 'data-testid': 'budgets-empty' }, t('budgets.none'));
    const amount = (b) => [b.token_budget ? fmtInt(b.tokens) + ' / ' + fmtInt(b.token_budget) + ' ' + t('budgets.tokens') : null,
      b.cost_budget_nanos ? (b.cost_nanos / 1e9).toFixed(2) + ' / ' + (b.cost_budget_nanos / 1e9).toFixed(2) : null].filter(Boolean).join(' · ');
    const rows = list.map((b) => {
      const th = b.thresholds || [];
      const warnAt = th.length > 1 ? th[th.length - 2] : 0.8;
      const level = b.share >= 1 ? 'over' : b.share >= warnAt ? 'warn' : 'ok';
      const width = Math.min(Math.max(b.share, 0), 1) * 100;
      return h('tr', { 'data-budget': b.name, class: 'burn-' + level },
        h('td', {}, b.name, b.enforce ? h('span', { class: 'muted' }, ' · ' + t('budgets.enforced')) : null),
        h('td', {}, b.scope + ':' + b.subject),
        h('td', {}, b.period === 'rolling' ? t('budgets.rolling', { from: fmtTime(b.from).slice(0, 16) }) : fmtTime(b.from).slice(0, 10) + ' → ' + fmtTime(b.to).slice(0, 10)),
        h('td', { class: 'num' }, amount(b)),
        h('td', { class: 'burn-cell' }, h('div', { class: 'burn-track' }, h('div', { class: 'burn-bar', style: `width:${width.toFixed(1)}%` }))),
        h('td', { class: 'num', 'data-testid': 'budgets-share' }, fmtPct(b.share) + ' %'),
        h('td', { class: 'muted' }, th.map((x) => Math.round(x * 100) + ' %').join(' / ')));
    });
    return h('div', { class: 'scroll' }, h('table', { 'data-testid': 'budgets-table' },
      h('thead', {}, h('tr', {}, [t('budgets.name'), t('budget.scope'), t('budgets.period'), t('budget.used_quota'), t('budget.burn'), t('budget.share'), t('budgets.thresholds')]
        .map((l, i) => h('th', { class: i === 3 || i === 5 ? 'num' : null }, l)))),
      h('tbody', {}, rows)));
  }
  // ---- Reconciliation -----------------------------------------------------
  // Runs of `tollgate reconcile` (GET /api/v1/reconciliations): a provider's
  // bill against the ledger. Tokens are input + output; the difference is
  // bill − ledger, highlighted when a run is over its tolerance.
  const tokensOf = (c) => (c ? (c.input || 0) + (c.output || 0) : 0);
  const signedInt = (v) => (isNum(v) ? (v > 0 ? '+' : '') + fmtInt(v) : dash);
  const moneyList = (l) => (l && l.length ? l.map((m) => fmtMoney(Number(m.amount), m.currency)).join(' · ') : dash);
  function severityLabel(s) {
    switch (s) {
      case 'ok': return t('recon.severity_ok');
      case 'explained': return t('recon.severity_explained');
      case 'warning': return t('recon.severity_warning');
      case 'critical': return t('recon.severity_critical');
      default: return s;
    }
  }
  function sideLabel(s) {
    switch (s) {
      case 'both': return t('recon.side_both');
      case 'bill_only': return t('recon.side_bill_only');
      case 'ledger_only': return t('recon.side_ledger_only');
      default: return s;
    }
  }
  // noteLabel words a reconciliation note from its code and parameters;
  // a code this page does not know keeps the server's English text.
  function noteLabel(n, text) {
    const p = n.params || {};
    switch (n.code) {
      case 'no_bill_line': return t('recon.note_no_bill_line');
      case 'no_ledger_line': return t('recon.note_no_ledger_line');
      case 'cut_streams_unbounded': return t('recon.note_cut_streams_unbounded', { streams: fmtInt(Number(p.streams)), output: fmtInt(Number(p.output)) });
      case 'cost_left_out': return t('recon.note_cost_left_out', { currency: p.currency || '', error: p.error || '' });
    }
    return text || n.code;
  }
  function causeLabel(c) {
    switch (c) {
      case 'cached_convention': return t('recon.cause_cached_convention');
      case 'retry_billed': return t('recon.cause_retry_billed');
      case 'stream_cut': return t('recon.cause_stream_cut');
      case 'tokenizer': return t('recon.cause_tokenizer');
      case 'batch_api': return t('recon.cause_batch_api');
      default: return c;
    }
  }
  const sevBadge = (s) => h('span', { class: 'badge ' + s, 'data-testid': 'recon-status', 'data-severity': s }, severityLabel(s));
  function relDiff(diff, base) {
    if (!base) return '';
    return ' (' + (diff > 0 ? '+' : '') + ((diff / base) * 100).toFixed(2) + ' %)';
  }
  function reconBody(runs) {
    if (!runs.length) return h('p', { class: 'placeholder', 'data-testid': 'recon-empty' }, t('recon.none'));
    const cols = [
      { label: t('recon.when'), cell: (r) => h('a', { href: href('reconciliation', String(r.id)), 'data-testid': 'recon-link' }, fmtTime(r.at).slice(0, 19)) },
      { label: t('recon.bill'), cell: (r) => h('span', { title: r.bill + ' (' + r.format + ')' }, r.bill.split(/[\\/]/).pop()) },
      { label: t('recon.period'), cell: (r) => (r.from === r.to ? r.from : r.from + ' – ' + r.to) },
      { label: t('recon.requests'), num: true, cell: (r) => fmtInt(r.bill_total.requests) + ' / ' + fmtInt(r.ledger_total.requests) },
      { label: t('recon.bill_tokens'), num: true, cell: (r) => h('span', { 'data-testid': 'recon-bill-tokens' }, fmtInt(tokensOf(r.bill_total))) },
      { label: t('recon.ledger_tokens'), num: true, cell: (r) => h('span', { 'data-testid': 'recon-ledger-tokens' }, fmtInt(tokensOf(r.ledger_total))) },
      { label: t('recon.diff'), num: true, cell: (r) => h('span', { class: 'recon-diff' }, h('span', { 'data-testid': 'recon-diff' }, signedInt(tokensOf(r.diff))), relDiff(tokensOf(r.diff), tokensOf(r.bill_total))) },
      { label: t('recon.unexplained'), num: true, cell: (r) => h('span', { 'data-testid': 'recon-unexplained' }, signedInt(tokensOf(r.unexplained))) },
      { label: t('recon.cost'), num: true, cell: (r) => moneyList(r.bill_cost) + ' / ' + moneyList(r.ledger_cost) },
      { label: t('recon.status'), cell: (r) => sevBadge(r.severity) },
    ];
    return h('div', { class: 'scroll' }, h('table', { 'data-testid': 'recon-table' },
      h('thead', {}, h('tr', {}, cols.map((c) => h('th', { class: c.num ? 'num' : null }, c.label)))),
      h('tbody', {}, runs.map((r) => h('tr', { 'data-run-id': String(r.id), class: r.over_tolerance ? 'recon-over' : null },
        cols.map((c) => h('td', { class: c.num ? 'num' : null }, c.cell(r))))))));
  }
  async function pageReconciliation(main, id) {
    main.append(h('p', {}, h('a', { href: '#/cost' }, '← ' + t('recon.back'))));
    let data;
    try { data = await api('reconciliations/' + encodeURIComponent(id)); } catch (err) { main.append(errorBox(err)); return; }
    const r = data.reconciliation, rep = data.report || {};
    const lines = rep.lines || [];
    main.append(h('h1', {}, t('recon.run_title', { id: r.id })));
    main.append(h('div', { class: 'card', 'data-testid': 'recon-summary' },
      kv([[t('recon.when'), fmtTime(r.at)], [t('recon.bill'), h('code', {}, r.bill)], [t('recon.format'), r.format],
        [t('recon.period'), r.from + ' – ' + r.to], [t('recon.status'), sevBadge(r.severity)],
        [t('recon.tolerance'), t('recon.tolerance_value', { warn: (r.tolerance.warn * 100).toFixed(1), critical: (r.tolerance.critical * 100).toFixed(1) })]]),
      h('p', { class: 'hint' }, t('recon.run_hint'))));
    const Q = [['requests', t('col.requests')], ['input', t('col.input_tokens')], ['cached', t('col.cached_input_tokens')], ['output', t('col.output_tokens')]];
    const causes = Object.keys(r.explained || {}).sort();
    main.append(h('div', { class: 'card', 'data-testid': 'recon-totals' }, h('h2', {}, t('recon.totals')),
      table([
        { label: t('recon.quantity'), cell: ([k, label]) => label },
        { label: t('recon.bill'), num: true, cell: ([k]) => fmtInt(r.bill_total[k]) },
        { label: t('recon.ledger'), num: true, cell: ([k]) => fmtInt(r.ledger_total[k]) },
        { label: t('recon.diff'), num: true, cell: ([k]) => signedInt(r.diff[k]) },
        ...causes.map((c) => ({ label: causeLabel(c), num: true, cell: ([k]) => signedInt(r.explained[c][k]) })),
        { label: t('recon.unexplained'), num: true, cell: ([k]) => signedInt(r.unexplained[k]) },
      ], Q)));
    const bl = (ln, k) => fmtInt(ln.bill[k]) + ' / ' + fmtInt(ln.ledger[k]);
    main.append(h('div', { class: 'card', 'data-testid': 'recon-lines' }, h('h2', {}, t('recon.lines', { n: lines.length })), h('p', { class: 'hint' }, t('recon.lines_hint')),
      lines.length ? h('div', { class: 'scroll' }, h('table', { 'data-testid': 'recon-lines-table' },
        h('thead', {}, h('tr', {}, [t('col.day'), t('col.model'), t('recon.key'), t('recon.side'), t('recon.status'), t('recon.requests'), t('recon.input'),
          t('recon.cached'), t('recon.output'), t('recon.diff'), t('recon.unexplained'), t('recon.explained'), t('recon.cost'), t('recon.notes')]
          .map((l, i) => h('th', { class: i >= 5 && i <= 10 ? 'num' : null }, l)))),
        h('tbody', {}, lines.map((ln) => h('tr', { class: ln.severity === 'warning' || ln.severity === 'critical' ? 'recon-over' : null, 'data-day': ln.day, 'data-model': ln.model },
          h('td', {}, ln.day), h('td', {}, ln.model, ln.batch ? h('span', { class: 'muted' }, ' · batch') : null), h('td', {}, ln.key || dash),
          h('td', {}, sideLabel(ln.side)), h('td', {}, sevBadge(ln.severity)),
          h('td', { class: 'num' }, bl(ln, 'requests')), h('td', { class: 'num' }, bl(ln, 'input')),
          h('td', { class: 'num' }, ln.no_cached ? dash : bl(ln, 'cached')), h('td', { class: 'num' }, bl(ln, 'output')),
          h('td', { class: 'num', 'data-testid': 'recon-line-diff' }, signedInt(tokensOf(ln.diff))),
          h('td', { class: 'num', 'data-testid': 'recon-line-unexplained' }, signedInt(tokensOf(ln.unexplained))),
          h('td', {}, (ln.explained || []).map((e) => causeLabel(e.cause) + ' ' + signedInt(tokensOf(e.amount))).join(' · ') || dash),
          h('td', { class: 'num' }, (ln.bill_cost ? fmtMoney(Number(ln.bill_cost.amount), ln.bill_cost.currency) : dash) + ' / ' + (ln.ledger_cost ? fmtMoney(Number(ln.ledger_cost.amount), ln.ledger_cost.currency) : dash)),
          h('td', { style: 'white-space:normal' }, ln.note_codes ? ln.note_codes.map((n, i) => noteLabel(n, (ln.notes || [])[i])).join(' ') : (ln.notes || []).join(' ')))))))
        : h('p', { class: 'placeholder' }, t('recon.no_lines'))));
  }
  async function pageCost(main, params) {
    const from = params.get('from') || '', to = params.get('to') || '';
    const form = h('form', { class: 'filters' },
      h('label', {}, t('filter.from'), h('input', { name: 'from', value: from, placeholder: '2026-11-01', size: 12 })),
      h('label', {}, t('filter.to'), h('input', { name: 'to', value: to, placeholder: '2026-12-01', size: 12 })),
      h('label', {}, t('filter.user'), h('input', { name: 'user', value: params.get('user') || '' })),
      h('label', {}, t('filter.biz_line'), h('input', { name: 'biz_line', value: params.get('biz_line') || '' })),
      h('label', {}, t('filter.model'), h('input', { name: 'model', value: params.get('model') || '' })),
      h('button', { type: 'submit' }, t('common.show')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const fd = new FormData(form), o = {};
      for (const k of ['from', 'to', 'user', 'biz_line', 'model']) o[k] = (fd.get(k) || '').trim();
      location.hash = href('cost', '', paramsOf(o));
    });
    main.append(h('h1', {}, t('cost.title')), h('div', { class: 'card' }, form, h('p', { class: 'hint' }, t('cost.period_hint'))));
    // Cost over time, one chart per currency (amounts in different
    // currencies are never added), stacked by business line or model.
    const by = params.get('cost_by') === 'model' ? 'model' : 'biz_line';
    const overTime = h('div', {}, h('p', { class: 'muted' }, t('common.loading')));
    const bySel = h('select', { 'data-testid': 'cost-by', onchange: (e) => { const p = new URLSearchParams(params); p.set('cost_by', e.target.value); location.hash = href('cost', '', p); } },
      h('option', { value: 'biz_line', selected: by === 'biz_line' }, t('col.biz_line')), h('option', { value: 'model', selected: by === 'model' }, t('col.model')));
    const noPrice = h('div', {});
    main.append(h('div', { class: 'card', 'data-testid': 'cost-over-time' }, h('h2', {}, t('cost.over_time')),
      h('p', { class: 'hint' }, h('label', {}, t('cost.stack_by'), ' ', bySel)), noPrice, overTime));
    const loadOverTime = async () => {
      const toMS = to && !isNaN(parseZone(to)) ? parseZone(to) : Date.now();
      const fromMS = from && !isNaN(parseZone(from)) ? parseZone(from) : toMS - 7 * 86400e3;
      const sq = new URLSearchParams({ from: iso(fromMS), to: iso(toMS), step: toMS - fromMS <= 2 * 86400e3 ? '1h' : '1d', by, measures: 'requests,cost_nanos' });
      for (const k of ['biz_line', 'model']) if (params.get(k)) sq.set(k, params.get(k));
      try {
        const [res, ov] = await Promise.all([api('series?' + sq.toString()), api(`overview?from=${encodeURIComponent(iso(fromMS))}&to=${encodeURIComponent(iso(toMS))}`).catch(() => null)]);
        const unpriced = ov ? ((ov.by_model || {}).top || []).filter((m) => m.requests > 0 && !Object.keys(m.cost || {}).length).map((m) => m.key) : [];
        noPrice.replaceChildren(unpriced.length ? h('p', { class: 'error', 'data-testid': 'no-price-models' }, t('cost.no_price_models', { models: unpriced.join(', ') })) : '');
        const series = res.series || [];
        const ts = series.length ? series[0].points.map((p) => p.t) : [];
        const curs = [...new Set(series.flatMap((x) => x.points.flatMap((p) => Object.keys(p.cost || {}))))].sort();
        if (!curs.length) { overTime.replaceChildren(h('p', { class: 'placeholder' }, t('cost.no_data'))); return; }
        const grid = h('div', { class: 'grid2' });
        overTime.replaceChildren(grid);
        for (const cur of curs) {
          const [card, plot] = chartCard(t('cost.over_time_currency', { currency: cur }), '', 'chart-cost-' + cur);
          grid.append(card);
          chart(plot, ts, series.map((x, j) => ({ label: x.key[by] || dash, values: x.points.map((p) => (p.cost && isNum(p.cost[cur]) ? p.cost[cur] : 0)), color: COLORS[j % COLORS.length] })),
            { stacked: true, unit: cur, fmt: (v) => fmtMoney(v, cur), xRange: [fromMS, toMS] });
        }
      } catch (err) { overTime.replaceChildren(errorBox(err)); }
    };
    const budget = h('div', {}, h('p', { class: 'muted' }, t('common.loading')));
    main.append(h('div', { class: 'card', 'data-testid': 'budget' }, h('h2', {}, t('budget.title')), h('p', { class: 'hint' }, t('budget.hint')), budget));
    const loadBudget = async () => {
      try {
        const res = await api('quotas');
        budget.replaceChildren(budgetBody(res.quotas || []));
      } catch (err) { budget.replaceChildren(errorBox(err)); }
    };
    const budgets = h('div', {}, h('p', { class: 'muted' }, t('common.loading')));
    main.append(h('div', { class: 'card', 'data-testid': 'budgets', 'data-api': 'budgets' }, h('h2', {}, t('budgets.title')), h('p', { class: 'hint' }, t('budgets.hint')), budgets));
    const loadBudgets = async () => {
      try {
        const res = await api('budgets');
        budgets.replaceChildren(budgetsBody(res.budgets || []));
      } catch (err) { budgets.replaceChildren(errorBox(err)); }
    };
    const recon = h('div', {}, h('p', { class: 'muted' }, t('common.loading')));
    main.append(h('div', { class: 'card', 'data-testid': 'reconcile', 'data-api': 'reconciliations?limit=20' }, h('h2', {}, t('recon.title')), h('p', { class: 'hint' }, t('recon.hint')), recon));
    const loadRecon = async () => {
      try {
        const res = await api('reconciliations?limit=20');
        recon.replaceChildren(reconBody(res.reconciliations || []));
      } catch (err) { recon.replaceChildren(errorBox(err)); }
    };
    const q = new URLSearchParams();
    for (const k of ['from', 'to', 'user', 'biz_line', 'model']) if (params.get(k)) q.set(k, params.get(k));
    const sections = [['top', t('cost.top'), t('cost.top_hint')], ['users', t('cost.users'), ''], ['biz', t('cost.biz'), ''], ['waste', t('cost.waste'), t('cost.waste_hint')]];
    const cards = sections.map(([kind, title, hint]) => {
      const body = h('div', {}, h('p', { class: 'muted' }, t('common.loading')));
      main.append(h('div', { class: 'card', 'data-testid': 'report-' + kind }, h('h2', {}, title), hint ? h('p', { class: 'hint' }, hint) : null, body));
      return [kind, body];
    });
    await Promise.all([loadOverTime(), loadBudget(), loadBudgets(), loadRecon(), ...cards.map(async ([kind, body]) => {
      try {
        const res = await api('reports/' + kind + '?' + q.toString());
        body.replaceChildren(h('p', { class: 'hint' }, t('cost.period', { from: fmtTime(res.from).slice(0, 16), to: fmtTime(res.to).slice(0, 16) })), reportTable(res));
      } catch (err) { body.replaceChildren(errorBox(err)); }
    })]);
  }

  // ---- Alerts -----------------------------------------------------------
  // requestsLink turns an alert's API link (/api/v1/requests?…) into the
  // Requests page with the same filters and time range.
  function requestsLink(link) {
    if (!link) return null;
    const q = new URLSearchParams(link.split('?')[1] || '');
    const p = new URLSearchParams();
    p.set('range', 'custom');
    for (const k of ['since', 'until', 'model', 'biz_line', 'template', 'user', 'errors', 'slow']) if (q.get(k)) p.set(k, k === 'errors' ? '1' : q.get(k));
    return h('a', { href: href('requests', '', p), 'data-testid': 'alert-requests' }, t('alerts.see_requests'));
  }
  const labelsText = (l) => (l ? Object.entries(l).map(([k, v]) => `${k}=${v}`).join(' ') : '');
  function alertSeverity(s) {
    switch (s) {
      case 'warning': return t('alert.severity_warning');
      case 'critical': return t('alert.severity_critical');
      case 'info': return t('alert.severity_info');
      default: return s || dash;
    }
  }
  function alertState(s) {
    switch (s) {
      case 'pending': return t('alert.state_pending');
      case 'firing': return t('alert.state_firing');
      case 'resolved': return t('alert.state_resolved');
      case 'inactive': return t('alert.state_inactive');
      default: return s || dash;
    }
  }
  // alertMessage says what an alert measured, in the page's language, from
  // its fields (the server's summary is English: kept as a title).
  // alertUnit shows an alert's value in its unit, in the page's language
  // (a ratio as a percentage).
  function alertValue(v, unit) {
    switch (unit) {
      case 'ratio': return isNum(v) ? fmtNum(v * 100) + ' %' : dash;
      case 's': return fmtNum(v) + ' s';
      case 'tokens': return fmtNum(v) + ' ' + t('unit.tokens');
      case 'requests': return fmtNum(v) + ' ' + t('unit.requests');
      case 'per hour': return fmtNum(v) + ' ' + t('unit.per_hour');
      case '': case undefined: return fmtNum(v);
      default: return fmtNum(v) + ' ' + unit;
    }
  }
  function alertMessage(a) {
    if (!a || !a.rule) return dash;
    const v = { rule: a.rule, value: alertValue(a.value, a.unit), threshold: alertValue(a.threshold, a.unit), unit: '' };
    return a.baseline ? t('alert.msg_baseline', Object.assign({ baseline: alertValue(a.baseline, a.unit) }, v)) : t('alert.msg', v);
  }
  const fmtNum = (v) => (isNum(v) ? String(+v.toPrecision(4)) : dash);
  const alertOfEvent = (e) => { try { return JSON.parse(e.Data || '{}'); } catch (x) { return {}; } };
  async function pageAlerts(main, params) {
    main.append(h('h1', {}, t('alerts.title')));
    let data;
    try { data = await api('alerts' + (params.get('since') ? '?since=' + encodeURIComponent(params.get('since')) : '')); } catch (err) { main.append(errorBox(err)); return; }
    const active = data.active || [];
    if (!(data.notifiers || []).length) main.append(h('p', { class: 'hint card', 'data-testid': 'no-notifier' }, t('alerts.no_notifier')));
    main.append(h('div', { class: 'card', 'data-testid': 'alerts-active' }, h('h2', {}, t('alerts.active', { n: active.length })),
      active.length ? table([
        { label: t('col.severity'), cell: (a) => h('span', { class: 'badge ' + a.severity, 'data-testid': 'alert-severity' }, alertSeverity(a.severity)) },
        { label: t('col.state'), cell: (a) => h('span', { class: 'badge ' + a.state }, alertState(a.state)) },
        { label: t('col.rule'), cell: (a) => h('code', {}, a.rule) },
        { label: t('col.labels'), cell: (a) => h('code', {}, labelsText(a.labels)) },
        { label: t('col.summary'), cell: (a) => h('span', { style: 'white-space:normal', title: a.summary }, alertMessage(a)) },
        { label: t('col.value'), num: true, cell: (a) => alertValue(a.value, a.unit) + ' / ' + alertValue(a.threshold, a.unit) },
        { label: t('col.since'), cell: (a) => fmtTime(a.starts_at) },
        { label: '', cell: (a) => requestsLink(a.link) },
      ], active) : h('p', { class: 'placeholder' }, t('alerts.none_active'))));
    const hist = data.history || [];
    main.append(h('div', { class: 'card', 'data-testid': 'alerts-history' }, h('h2', {}, t('alerts.history')), h('p', { class: 'hint' }, t('alerts.history_hint')),
      hist.length ? table([
        { label: t('col.at'), cell: (e) => fmtTime(e.At) },
        { label: t('col.state'), cell: (e) => { const a = alertOfEvent(e); return h('span', { class: 'badge ' + (a.state || '') }, alertState(a.state)); } },
        { label: t('col.subject'), cell: (e) => h('code', {}, e.Subject) },
        { label: t('col.summary'), cell: (e) => h('span', { style: 'white-space:normal', title: e.Message }, alertMessage(alertOfEvent(e))) },
        { label: '', cell: (e) => { try { return requestsLink(JSON.parse(e.Data || '{}').link); } catch (x) { return null; } } },
      ], hist) : h('p', { class: 'placeholder' }, t('alerts.none_history'))));
  }

  // ---- time windows and charts for Overview and Diagnostics -------------
  const STEPS = ['1m', '5m', '1h', '1d'];
  const STEP_S = { '1m': 60, '5m': 300, '1h': 3600, '1d': 86400 };
  const iso = (ms) => new Date(ms).toISOString().replace('.000Z', 'Z');
  // window reads range/from/to/step from the URL: a named range ends now;
  // from+to (RFC 3339) is a custom one. The step, when not given, keeps the
  // number of points reasonable.
  function window_(params, defRange) {
    let range = params.get('range') || '';
    let from = params.get('from') || '', to = params.get('to') || '';
    let fromMS, toMS;
    if (from && to && !isNaN(Date.parse(from)) && !isNaN(Date.parse(to))) {
      range = 'custom'; fromMS = Date.parse(from); toMS = Date.parse(to);
    } else {
      if (!RANGES[range]) range = defRange;
      toMS = Date.now(); fromMS = toMS - RANGES[range];
      from = ''; to = '';
    }
    const span = (toMS - fromMS) / 1000;
    let step = params.get('step') || '';
    if (!STEPS.includes(step)) step = span <= 2 * 3600 ? '1m' : span <= 12 * 3600 ? '5m' : span <= 14 * 86400 ? '1h' : '1d';
    return { range, from, to, fromISO: iso(fromMS), toISO: iso(toMS), fromMS, toMS, step };
  }
  // MIN_RATE_N: a bucket with fewer requests draws no rate (one failure
  // in one request is not "100 % errors"); its counts still show.
  const MIN_RATE_N = 5;
  const rateOf = (p, k) => (p && p.requests >= MIN_RATE_N && isNum(p[k]) ? p[k] * 100 : null);
  const partialOf = (sp) => sp.findIndex((p) => p.partial);
  // alertMarkers are the alert starts and ends of the window, for charts.
  async function alertMarkers(w) {
    try {
      const res = await api('alerts?since=' + encodeURIComponent(w.fromISO));
      return (res.history || []).filter((e) => Date.parse(e.At) <= w.toMS).map((e) => ({ at: e.At, kind: alertOfEvent(e).state === 'resolved' ? 'resolved' : 'fired' }));
    } catch (err) { return []; }
  }
  const finer = (step) => ({ '1d': '1h', '1h': '5m', '5m': '1m', '1m': '1m' }[step]);
  const CURRENCY = { CNY: '¥', USD: '$', EUR: '€', JPY: '¥', GBP: '£' };
  function fmtMoney(v, cur) {
    if (!isNum(v)) return dash;
    const s = v === 0 ? '0' : Math.abs(v) >= 1 ? v.toFixed(2) : v.toPrecision(3);
    return (CURRENCY[cur] || '') + s + ' ' + cur;
  }
  const fmtCosts = (m) => (m && Object.keys(m).length ? Object.keys(m).sort().map((c) => fmtMoney(m[c], c)).join(' · ') : dash);
  const fmtSec = (v) => (isNum(v) ? (v * 1000).toFixed(1) : dash); // seconds shown as ms
  const fmtPct = (v) => (isNum(v) ? (v * 100).toFixed(1) : dash);
  const pctCell = (v) => (isNum(v) ? fmtPct(v) + ' %' : dash);
  const fmtQPS = (v) => (isNum(v) ? (v >= 10 ? v.toFixed(1) : v.toPrecision(3)) : dash);
  const fmtBucket = (s) => fmtTime(s).slice(0, 16);
  const COLORS = ['#2457c5', '#f79009', '#b42318', '#12b76a', '#7a5af8', '#ee46bc', '#98a2b3', '#2e90fa'];
  const SEG_COLORS = { gateway_queue: '#98a2b3', connect: '#7a5af8', engine_queue: '#f79009', prefill: '#2e90fa', decode: '#12b76a', post_processing: '#ee46bc', client_write: '#f04438', unattributed: '#d0d5dd' };

  // chart draws lines over time: ts are RFC 3339 step starts, lines
  // [{label, values, color}]. stacked fills each line on top of the
  // previous ones (the legend still shows each line's own value). onPick(i)
  // is called with the bucket index a click lands on.
  function chart(el, ts, lines, opts) {
    opts = opts || {};
    if (typeof uPlot !== 'function') { el.append(h('p', { class: 'muted' }, t('request.timeline_nochart'))); return; }
    if (!ts.length) { el.append(h('p', { class: 'muted' }, t('chart.no_data'))); return; }
    const xs = ts.map((s) => Date.parse(s) / 1000);
    let data = lines.map((l) => l.values.map((v) => (isNum(v) ? v : null)));
    let order = lines.map((_, i) => i);
    if (opts.stacked) {
      const acc = xs.map(() => 0);
      data = data.map((vals) => vals.map((v, i) => (acc[i] += v || 0)));
      order = order.reverse(); // the tallest first, so each smaller one paints over it
    }
    // x: the page's zone, numbers only (no month names to translate), over
    // the window asked (opts.xRange, ms) so a lone bucket or the engines'
    // samples line up with the charts beside them.
    const xr = opts.xRange ? [opts.xRange[0] / 1000, opts.xRange[1] / 1000] : null;
    const spanS = xr ? xr[1] - xr[0] : xs[xs.length - 1] - xs[0];
    const tick = (v) => {
      const d = parts(v * 1000), day = `${pad(d.mo)}-${pad(d.d)}`;
      if (spanS > 2 * 86400) return d.H === 0 && d.M === 0 ? day : `${day} ${pad(d.H)}:${pad(d.M)}`;
      return `${pad(d.H)}:${pad(d.M)}` + (spanS <= 600 ? `:${pad(d.S)}` : '');
    };
    const series = [{ label: t('col.bucket'), value: (u, v) => (v == null ? dash : fmtTime(v * 1000).slice(0, 16)) }].concat(order.map((i) => ({
      label: lines[i].label, stroke: lines[i].color, width: 2,
      fill: opts.stacked ? lines[i].color : undefined, spanGaps: !!opts.spanGaps,
      points: { show: true, size: xs.length < 60 ? 5 : 3 }, // a lone value between gaps is a point, not a line
      value: (u, v, si, idx) => { const raw = lines[i].values[idx]; return isNum(raw) ? (opts.fmt || String)(raw) : dash; },
    })));
    const width = Math.max(200, Math.min(1300, (el.parentElement ? el.parentElement.clientWidth : 640) - 32));
    const u = new uPlot({
      width, height: opts.height || 220,
      // Tick labels to six significant digits: uPlot's own rounding could
      // print 0.0025 and 0.002 both as "0.002" on small rates.
      axes: [{ values: (u, splits) => splits.map((v) => (v == null ? '' : tick(v))) },
        { label: opts.unit || '', size: 60, values: (u, splits) => splits.map((v) => (v == null ? '' : String(Number(v.toPrecision(6))))) }],
      scales: { x: xr ? { time: true, range: () => xr } : { time: true }, y: { range: (u, mn, mx) => [0, mx > 0 ? mx * 1.1 : 1] } },
      series, legend: { show: true },
      hooks: { draw: [(u) => drawMarks(u, opts, xs)] },
    }, [xs].concat(order.map((i) => data[i])), el);
    el.dataset.partial = opts.partial !== undefined && opts.partial !== null && opts.partial >= 0 ? String(opts.partial) : '';
    el.dataset.markers = String((opts.markers || []).length);
    el.uplot = u; // lets a test (or the console) aim at a bucket's point: el.uplot.valToPos(t, 'x')
    if (opts.onPick) {
      // A click picks the bucket under the cursor. Not on 'click': uPlot
      // swallows a click whose press and release it placed apart, which
      // happens on a press that moved a pixel and on the plot's last pixel
      // (the newest bucket's point). A press and release within 4 px pick;
      // a longer drag is left to uPlot's zoom.
      u.over.style.cursor = 'pointer';
      let down = null;
      u.over.addEventListener('mousedown', (e) => { down = e.button === 0 ? [e.clientX, e.clientY] : null; });
      u.over.addEventListener('mouseup', (e) => {
        const d = down;
        down = null;
        if (!d || Math.hypot(e.clientX - d[0], e.clientY - d[1]) > 4) return;
        const i = u.cursor.idx;
        if (i !== null && i !== undefined) opts.onPick(i);
      });
    }
    return u;
  }
  // drawMarks shades the bucket in progress (opts.partial: its index; it
  // is not a dip, its count is still growing) and draws the alerts' start
  // (red) and end (green) as vertical lines (opts.markers: [{at, kind}]).
  function drawMarks(u, opts, xs) {
    const c = u.ctx, top = u.bbox.top, hgt = u.bbox.height;
    c.save();
    if (opts.partial !== undefined && opts.partial !== null && opts.partial >= 0 && xs[opts.partial] !== undefined) {
      const x0 = u.valToPos(xs[opts.partial], 'x', true);
      const end = opts.stepS ? xs[opts.partial] + opts.stepS : u.scales.x.max;
      const x1 = Math.max(x0 + 4, u.valToPos(Math.min(end, u.scales.x.max), 'x', true));
      c.fillStyle = 'rgba(152,162,179,0.18)';
      c.fillRect(x0, top, x1 - x0, hgt);
    }
    for (const m of opts.markers || []) {
      const x = u.valToPos(Date.parse(m.at) / 1000, 'x', true);
      if (!(x >= u.bbox.left && x <= u.bbox.left + u.bbox.width)) continue;
      c.strokeStyle = m.kind === 'resolved' ? '#12b76a' : '#b42318';
      c.lineWidth = 2;
      c.setLineDash([5, 4]);
      c.beginPath(); c.moveTo(x, top); c.lineTo(x, top + hgt); c.stroke();
    }
    c.restore();
  }
  const chartCard = (title, hint, id) => {
    const plot = h('div', { class: 'plot', 'data-testid': id });
    return [h('div', { class: 'card' }, h('h2', {}, title), hint ? h('p', { class: 'hint' }, hint) : null, plot), plot];
  };
  // one series (no by) from /series or /percentiles: its points, or [].
  const pointsOf = (res) => (res && res.series && res.series[0] ? res.series[0].points : []);
  // tryAPI is api() that answers null for a 404 (percentiles without windows).
  async function tryAPI(path) {
    try { return await api(path); } catch (err) { if (err.status === 404) return null; throw err; }
  }
  function rangeForm(page, w, params, extra) {
    const rangeSel = h('select', { name: 'range' }, [...Object.keys(RANGES), 'custom'].map((r) => h('option', { value: r, selected: r === w.range }, rangeLabel(r))));
    const stepSel = h('select', { name: 'step' }, ['', ...STEPS].map((s) => h('option', { value: s, selected: s === (params.get('step') || '') }, s || t('filter.step_auto'))));
    const form = h('form', { class: 'filters', 'data-testid': 'filters' },
      h('label', {}, t('filter.range'), rangeSel),
      h('label', {}, t('filter.since_zone', { zone: zoneLabel() }), h('input', { name: 'from', value: shownFromURL(w.from), placeholder: isoZone(Date.now() - 3600e3).slice(0, 16), size: 25 })),
      h('label', {}, t('filter.until_zone', { zone: zoneLabel() }), h('input', { name: 'to', value: shownFromURL(w.to), placeholder: isoZone(Date.now()).slice(0, 16), size: 25 })),
      h('label', {}, t('filter.step'), stepSel),
      (extra || []).map((k) => h('label', {}, filterLabel(k), h('input', { name: k, value: params.get(k) || '' }))),
      h('button', { type: 'submit' }, t('common.show')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const fd = new FormData(form), o = {};
      for (const k of ['range', 'from', 'to', 'step', ...(extra || [])]) o[k] = (fd.get(k) || '').trim();
      o.from = o.from && typedToURL(o.from); o.to = o.to && typedToURL(o.to);
      if ((o.from || o.to) && o.range !== 'custom' && (o.from !== w.from || o.to !== w.to)) o.range = 'custom';
      if (o.range !== 'custom') { o.from = ''; o.to = ''; }
      location.hash = href(page, '', paramsOf(o));
    });
    return form;
  }
  function filterLabel(k) {
    switch (k) {
      case 'model': return t('filter.model');
      case 'biz_line': return t('filter.biz_line');
      case 'upstream': return t('filter.upstream');
      default: return k;
    }
  }
  // diagLink: Diagnostics for one bucket [t, t+step), at a finer step.
  function diagParams(tStart, step, filters) {
    const f = Date.parse(tStart);
    return paramsOf(Object.assign({ range: 'custom', from: iso(f), to: iso(f + STEP_S[step] * 1000), step: finer(step) }, filters || {}));
  }
  function requestsParams(fromISO, toISO, filters) {
    const o = { range: 'custom', since: fromISO, until: toISO };
    for (const k of ['model', 'biz_line']) if (filters && filters[k]) o[k] = filters[k];
    return paramsOf(o);
  }

  // ---- Overview ---------------------------------------------------------
  // change shows a figure against the previous period of the same length.
  function change(cur, prev, id) {
    if (!isNum(cur) || !isNum(prev)) return h('div', { class: 'delta muted', 'data-testid': id }, t('ov.prev_none'));
    if (prev === 0) return h('div', { class: 'delta muted', 'data-testid': id }, t('ov.prev_value', { v: cur === 0 ? '0' : '—' }));
    const d = (cur - prev) / Math.abs(prev) * 100;
    return h('div', { class: 'delta ' + (Math.abs(d) < 0.05 ? 'muted' : d > 0 ? 'up' : 'down'), 'data-testid': id },
      t('ov.prev_change', { pct: (d > 0 ? '+' : '') + d.toFixed(1) }));
  }
  const tile = (label, value, unit, id, extra, raw) => { const f = figure(label, value, unit, id, raw); if (extra) f.append(extra); return f; };
  async function pageOverview(main, params) {
    const w = window_(params, '24h');
    main.append(h('h1', {}, t('overview.title')), h('div', { class: 'card' }, rangeForm('overview', w, params), h('p', { class: 'hint' }, t('overview.hint'))));
    const out = h('div', {}, h('p', { class: 'muted' }, t('common.loading')));
    main.append(out);
    const span = `from=${encodeURIComponent(w.fromISO)}&to=${encodeURIComponent(w.toISO)}`;
    const ovPath = 'overview?' + span;
    const len = w.toMS - w.fromMS;
    const prevPath = `overview?from=${encodeURIComponent(iso(w.fromMS - len))}&to=${encodeURIComponent(w.fromISO)}`;
    let ov, prev, se, pe, pt, marks;
    try {
      [ov, prev, se, pe, pt, marks] = await Promise.all([api(ovPath), api(prevPath).catch(() => null), api(`series?${span}&step=${w.step}&measures=requests,errors`),
        tryAPI(`percentiles?${span}&step=${w.step}&quantity=e2e`), tryAPI(`percentiles?${span}&step=${w.step}&quantity=ttft`), alertMarkers(w)]);
    } catch (err) { out.replaceChildren(errorBox(err)); return; }
    const T = ov.totals || {}, L = ov.latency_s || {}, e2e = L.e2e || {}, ttft = L.ttft || {};
    const PT = (prev && prev.totals) || {}, PL = (prev && prev.latency_s) || {};
    const pv = (k) => (prev ? PT[k] : null);
    out.replaceChildren();
    out.append(h('p', { class: 'hint', 'data-testid': 'period' }, t('overview.period_zone', { from: fmtTime(ov.from).slice(0, 16), to: fmtTime(ov.to).slice(0, 16), zone: zoneLabel() })));
    const engineRate = isNum(ov.engine_prefix_cache_hit_rate) ? h('div', { class: 'delta muted', 'data-testid': 'ov-engine-prefix' }, t('ov.engine_prefix', { v: fmtPct(ov.engine_prefix_cache_hit_rate) })) : null;
    out.append(h('div', { class: 'figures card', 'data-testid': 'ov-figures', 'data-api': ovPath },
      tile(t('ov.requests'), fmtInt(T.requests), '', 'ov-requests', change(T.requests, pv('requests'), 'ov-requests-prev'), T.requests),
      tile(t('ov.qps'), fmtQPS(ov.qps), t('unit.per_s'), 'ov-qps', change(ov.qps, prev && prev.qps, 'ov-qps-prev'), ov.qps),
      tile(t('ov.error_rate'), fmtPct(T.error_rate), '%', 'ov-error-rate', change(T.error_rate, pv('error_rate'), 'ov-error-rate-prev')),
      tile(t('ov.e2e_p50'), fmtSec(e2e.p50), 'ms', 'ov-e2e-p50'),
      tile(t('ov.e2e_p95'), fmtSec(e2e.p95), 'ms', 'ov-e2e-p95'),
      tile(t('ov.e2e_p99'), fmtSec(e2e.p99), 'ms', 'ov-e2e-p99', change(e2e.p99, PL.e2e && PL.e2e.p99, 'ov-e2e-p99-prev')),
      tile(t('ov.ttft_p50'), fmtSec(ttft.p50), 'ms', 'ov-ttft-p50'),
      tile(t('ov.ttft_p95'), fmtSec(ttft.p95), 'ms', 'ov-ttft-p95'),
      tile(t('ov.ttft_p99'), fmtSec(ttft.p99), 'ms', 'ov-ttft-p99', change(ttft.p99, PL.ttft && PL.ttft.p99, 'ov-ttft-p99-prev')),
      tile(t('ov.input_tokens'), fmtInt(T.input_tokens), t('unit.tokens'), 'ov-input-tokens', change(T.input_tokens, pv('input_tokens'), 'ov-input-prev'), T.input_tokens),
      tile(t('ov.output_tokens'), fmtInt(T.output_tokens), t('unit.tokens'), 'ov-output-tokens', change(T.output_tokens, pv('output_tokens'), 'ov-output-prev'), T.output_tokens),
      tile(t('ov.prefix_cache_share'), fmtPct(T.prefix_cache_share), '%', 'ov-cache', engineRate, T.prefix_cache_share),
      tile(t('ov.response_cache_share'), fmtPct(T.response_cache_share), '%', 'ov-response-cache'),
      tile(t('ov.cost'), fmtCosts(T.cost), '', 'ov-cost'),
      tile(t('ov.alerts'), h('a', { href: '#/alerts' }, fmtInt((ov.alerts || {}).active)), '', 'ov-alerts')));
    if (!isNum(e2e.p50) && T.requests) out.append(h('p', { class: 'hint' }, t('overview.no_percentiles')));

    const sp = pointsOf(se), ts = sp.map((p) => p.t);
    const pick = (i) => { if (sp[i]) location.hash = href('diagnostics', '', diagParams(sp[i].t, w.step)); };
    const byT = (res) => { const m = {}; for (const p of pointsOf(res)) m[p.t] = p; return m; };
    const e2eT = byT(pe), ttftT = byT(pt);
    const common = { xRange: [w.fromMS, w.toMS], partial: partialOf(sp), stepS: STEP_S[w.step], markers: marks, onPick: pick };
    const [c1, p1] = chartCard(t('overview.chart_qps'), t('overview.chart_click_partial'), 'chart-qps');
    const [c2, p2] = chartCard(t('overview.chart_errors'), t('overview.chart_min_n', { n: MIN_RATE_N }), 'chart-errors');
    const [c3, p3] = chartCard(t('overview.chart_e2e_p99'), '', 'chart-p99');
    const [c4, p4] = chartCard(t('overview.chart_ttft_p99'), '', 'chart-ttft-p99');
    out.append(h('div', { class: 'grid2' }, c1, c2), h('div', { class: 'grid2' }, c3, c4));
    chart(p1, ts, [{ label: t('ov.qps'), values: sp.map((p) => p.qps), color: COLORS[0] }], Object.assign({ unit: t('unit.per_s'), fmt: fmtQPS }, common));
    chart(p2, ts, [{ label: t('ov.error_rate'), values: sp.map((p) => rateOf(p, 'error_rate')), color: COLORS[2] }], Object.assign({ unit: '%', fmt: (v) => v.toFixed(1) }, common));
    chart(p3, ts, [{ label: t('ov.e2e_p99'), values: ts.map((x) => (e2eT[x] && isNum(e2eT[x].p99) ? e2eT[x].p99 * 1000 : null)), color: COLORS[0] }], Object.assign({ unit: 'ms', fmt: (v) => v.toFixed(1) }, common));
    chart(p4, ts, [{ label: t('ov.ttft_p99'), values: ts.map((x) => (ttftT[x] && isNum(ttftT[x].p99) ? ttftT[x].p99 * 1000 : null)), color: COLORS[1] }], Object.assign({ unit: 'ms', fmt: (v) => v.toFixed(1) }, common));

    // The buckets with traffic, each a link to its diagnostics: the same
    // drill-down as a click on a chart, without aiming at a point.
    const busy = sp.filter((p) => p.requests > 0).reverse().slice(0, 60);
    out.append(h('div', { class: 'card', 'data-testid': 'ov-buckets' }, h('h2', {}, t('overview.buckets', { step: w.step })), h('p', { class: 'hint' }, t('overview.buckets_hint')),
      busy.length ? table([
        { label: t('col.bucket'), cell: (p) => h('a', { href: href('diagnostics', '', diagParams(p.t, w.step)), 'data-testid': 'bucket-link', 'data-t': p.t }, fmtBucket(p.t), p.partial ? h('span', { class: 'muted' }, ' · ' + t('chart.partial')) : null) },
        { label: t('col.requests'), num: true, cell: (p) => fmtInt(p.requests) },
        { label: t('col.errors'), num: true, cell: (p) => fmtInt(p.errors) },
        { label: t('ov.qps'), num: true, cell: (p) => fmtQPS(p.qps) },
        { label: t('ov.e2e_p99') + ' (ms)', num: true, cell: (p) => fmtSec(e2eT[p.t] && e2eT[p.t].p99) },
        { label: t('ov.ttft_p99') + ' (ms)', num: true, cell: (p) => fmtSec(ttftT[p.t] && ttftT[p.t].p99) },
      ], busy) : h('p', { class: 'placeholder' }, t('overview.no_traffic'))));

    const groupTable = (dim, g, id) => h('div', { class: 'card', 'data-testid': id },
      h('h2', {}, dim === 'biz_line' ? t('overview.by_biz_line', { n: (g && g.groups) || 0 }) : t('overview.by_model', { n: (g && g.groups) || 0 })),
      g && g.top && g.top.length ? table([
        { label: dim === 'biz_line' ? t('col.biz_line') : t('col.model'), cell: (r) => h('a', { href: href('diagnostics', '', paramsOf({ range: w.range === 'custom' ? '' : w.range, from: w.from, to: w.to, [dim]: r.key })) }, r.key || dash) },
        { label: t('col.requests'), num: true, cell: (r) => fmtInt(r.requests) },
        { label: t('col.error_rate'), num: true, cell: (r) => pctCell(r.error_rate) },
        { label: t('col.prefix_cache_share'), num: true, cell: (r) => pctCell(r.prefix_cache_share) },
        { label: t('col.input_tokens'), num: true, cell: (r) => fmtInt(r.input_tokens) },
        { label: t('col.output_tokens'), num: true, cell: (r) => fmtInt(r.output_tokens) },
        { label: t('col.e2e_mean_ms'), num: true, cell: (r) => fmtSec(r.e2e_mean_s) },
        { label: t('col.ttft_mean_ms'), num: true, cell: (r) => fmtSec(r.ttft_mean_s) },
        { label: t('col.cost'), num: true, cell: (r) => (dim === 'model' && r.requests && !Object.keys(r.cost || {}).length ? h('span', { class: 'muted', 'data-testid': 'no-price' }, t('cost.no_price_short')) : fmtCosts(r.cost)) },
      ], g.top) : h('p', { class: 'placeholder' }, t('overview.no_traffic')));
    // One table per row: at 1440 px two side by side would clip their
    // last columns (latency, cost).
    out.append(groupTable('biz_line', ov.by_biz_line, 'ov-by-biz'), groupTable('model', ov.by_model, 'ov-by-model'));
  }

  // ---- What changed (GET /api/v1/why) -----------------------------------
  // Each message code of internal/why rendered from the catalogue, with
  // its parameters; a code this page does not know shows its English text.
  const WHY_MSG = {
    'why.figure': (p) => t('why.figure', p), 'why.segment': (p) => t('why.segment', p), 'why.advice_queue': (p) => t('why.advice_queue', p),
    'why.slice_slow': (p) => t('why.slice_slow', p), 'why.slice_rate': (p) => t('why.slice_rate', p), 'why.slice_mix': (p) => t('why.slice_mix', p),
    'why.also': (p) => t('why.also', p), 'why.input': (p) => t('why.input', p), 'why.spread': (p) => t('why.spread', p),
    'why.prompt': (p) => t('why.prompt', p), 'why.since': (p) => t('why.since', p), 'why.too_few': (p) => t('why.too_few', p),
  };
  // whyCard: what changed in the last 15 minutes against the hour before,
  // each sentence linked to the requests behind it.
  function whyCard(filters) {
    const q = new URLSearchParams({ since: '15m', against: '1h' });
    for (const k of ['model', 'biz_line', 'upstream']) if (filters[k]) q.set(k, filters[k]);
    const body = h('div', {}, h('p', { class: 'muted' }, t('common.loading')));
    const card = h('div', { class: 'card', 'data-testid': 'diag-why', 'data-api': 'why?' + q.toString() }, h('h2', {}, t('why.title')), h('p', { class: 'hint' }, t('why.hint')), body);
    api('why?' + q.toString()).then((rep) => {
      const items = (rep.messages || []).map((m) => {
        const text = WHY_MSG[m.code] ? WHY_MSG[m.code](m.params || {}) : m.text;
        const link = m.link && m.link.startsWith('/api/v1/requests?') ? '#/requests?range=custom&' + m.link.slice('/api/v1/requests?'.length) : null;
        return h('li', { 'data-code': m.code }, link ? h('a', { href: link }, text) : text);
      });
      body.replaceChildren(items.length ? h('ol', { class: 'why' }, items) : h('p', { class: 'placeholder' }, t('cost.no_data')));
    }).catch((err) => body.replaceChildren(errorBox(err)));
    return card;
  }

  // ---- Diagnostics ------------------------------------------------------
  const DIAG_FILTERS = ['model', 'biz_line', 'upstream'];
  async function pageDiagnostics(main, params) {
    const w = window_(params, '1h');
    const filters = {};
    for (const k of DIAG_FILTERS) if (params.get(k)) filters[k] = params.get(k);
    const fq = Object.entries(filters).map(([k, v]) => `&${k}=${encodeURIComponent(v)}`).join('');
    const span = `from=${encodeURIComponent(w.fromISO)}&to=${encodeURIComponent(w.toISO)}`;
    const reqLink = h('a', { href: href('requests', '', requestsParams(w.fromISO, w.toISO, filters)), 'data-testid': 'diag-requests-link', class: 'button' }, t('diag.see_requests'));
    main.append(h('h1', {}, t('diag.title')), h('div', { class: 'card' }, rangeForm('diagnostics', w, params, DIAG_FILTERS),
      h('p', { class: 'hint' }, t('diag.hint')), h('p', {}, reqLink, filters.upstream ? h('span', { class: 'hint' }, ' ', t('diag.upstream_not_in_requests')) : null)));
    main.append(whyCard(filters));
    const out = h('div', {}, h('p', { class: 'muted' }, t('common.loading')));
    main.append(out);
    const Q = ['ttft', 'tpot', 'e2e', 'gateway_queue', 'engine_queue'];
    let se, biz, pct, len, eng, dg, marks;
    try {
      [se, biz, pct, marks] = await Promise.all([
        api(`series?${span}&step=${w.step}${fq}`),
        api(`series?${span}&step=${w.step}&by=biz_line&measures=requests,input_tokens,cached_input_tokens,output_tokens${fq}`),
        Promise.all(Q.map((q) => tryAPI(`percentiles?${span}&step=${w.step}&quantity=${q}${fq}`))), alertMarkers(w)]);
    } catch (err) { out.replaceChildren(errorBox(err)); return; }
    try {
      const rq = new URLSearchParams({ from: w.fromISO, to: w.toISO });
      for (const k of ['model', 'biz_line', 'upstream']) if (filters[k]) rq.set(k, filters[k]);
      len = await api('reports/length?' + rq.toString());
    } catch (err) { len = { error: err }; }
    const dq = new URLSearchParams({ from: w.fromISO, to: w.toISO });
    for (const k of ['model', 'biz_line']) if (filters[k]) dq.set(k, filters[k]);
    const eq = new URLSearchParams({ from: w.fromISO, to: w.toISO });
    if (filters.upstream) eq.set('upstream', filters.upstream);
    [eng, dg] = await Promise.all([api('engine?' + eq.toString()).catch((err) => ({ error: err })), api('diagnose?' + dq.toString()).catch((err) => ({ error: err }))]);
    dg.path = 'diagnose?' + dq.toString();
    out.replaceChildren();
    const sp = pointsOf(se), ts = sp.map((p) => p.t);
    const total = sp.reduce((a, p) => a + (p.requests || 0), 0);
    out.append(h('p', { class: 'hint', 'data-testid': 'period' }, t('overview.period_zone', { from: fmtTime(se.from).slice(0, 16), to: fmtTime(se.to).slice(0, 16), zone: zoneLabel() }), ' · ',
      t('diag.total', { n: total, step: w.step })));
    out.append(h('span', { hidden: true, 'data-testid': 'diag-requests', 'data-api': `series?${span}&step=${w.step}${fq}` }, String(total)));
    const toReq = (i) => { if (sp[i]) location.hash = href('requests', '', requestsParams(sp[i].t, iso(Date.parse(sp[i].t) + STEP_S[w.step] * 1000), filters)); };
    const P = {};
    Q.forEach((q, i) => { P[q] = {}; for (const p of pointsOf(pct[i])) P[q][p.t] = p; });
    const pctLines = (q, label) => ['p50', 'p95', 'p99'].map((k, j) => ({ label: label + ' ' + k.toUpperCase(), values: ts.map((x) => (P[q][x] && isNum(P[q][x][k]) ? P[q][x][k] * 1000 : null)), color: COLORS[j] }));
    const xc = { xRange: [w.fromMS, w.toMS], partial: partialOf(sp), stepS: STEP_S[w.step], markers: marks, onPick: toReq };
    const ms = Object.assign({ unit: 'ms', fmt: (v) => v.toFixed(1) }, xc);
    if (pct.every((r) => r === null)) out.append(h('p', { class: 'hint' }, t('overview.no_percentiles')));
    const cards = [
      [t('diag.chart_ttft'), t('diag.chart_click'), 'chart-ttft', pctLines('ttft', 'TTFT'), ms],
      [t('diag.chart_tpot'), '', 'chart-tpot', pctLines('tpot', 'TPOT'), ms],
      [t('diag.chart_e2e'), '', 'chart-e2e', pctLines('e2e', 'E2E'), ms],
      [t('diag.chart_segments'), t('diag.chart_segments_hint'), 'chart-segments',
        SEGMENTS.map((s) => ({ label: segLabel(s), values: sp.map((p) => (isNum(p['seg_' + s + '_mean_s']) ? p['seg_' + s + '_mean_s'] * 1000 : null)), color: SEG_COLORS[s] })),
        Object.assign({ stacked: true, height: 260 }, ms)],
      [t('diag.chart_queues'), t('diag.chart_queues_hint'), 'chart-queues',
        [...pctLines('gateway_queue', t('seg.gateway_queue')), ...pctLines('engine_queue', t('seg.engine_queue')).map((l, j) => Object.assign(l, { color: COLORS[3 + j] }))], ms],
      [t('diag.chart_cache'), t('overview.chart_min_n', { n: MIN_RATE_N }), 'chart-cache', [
        { label: t('ov.prefix_cache_share'), values: sp.map((p) => rateOf(p, 'prefix_cache_share')), color: COLORS[3] },
        { label: t('ov.response_cache_share'), values: sp.map((p) => rateOf(p, 'response_cache_share')), color: COLORS[4] }],
        Object.assign({ unit: '%', fmt: (v) => v.toFixed(1) }, xc)],
    ];
    const grid = h('div', { class: 'grid2' });
    out.append(grid);
    for (const [title, hint, id, lines, opts] of cards) {
      const [card, plot] = chartCard(title, hint, id);
      grid.append(card);
      chart(plot, ts, lines, opts);
    }

    const busy = sp.filter((p) => p.requests > 0).reverse().slice(0, 60);
    out.append(h('div', { class: 'card', 'data-testid': 'diag-buckets' }, h('h2', {}, t('overview.buckets', { step: w.step })), h('p', { class: 'hint' }, t('diag.buckets_hint')),
      busy.length ? table([
        { label: t('col.bucket'), cell: (p) => h('a', { href: href('requests', '', requestsParams(p.t, iso(Date.parse(p.t) + STEP_S[w.step] * 1000), filters)), 'data-testid': 'bucket-requests' }, fmtBucket(p.t)) },
        { label: t('col.requests'), num: true, cell: (p) => fmtInt(p.requests) },
        { label: t('col.errors'), num: true, cell: (p) => fmtInt(p.errors) },
        { label: 'TTFT P99 (ms)', num: true, cell: (p) => fmtSec(P.ttft[p.t] && P.ttft[p.t].p99) },
        { label: 'TPOT P99 (ms)', num: true, cell: (p) => fmtSec(P.tpot[p.t] && P.tpot[p.t].p99) },
        { label: 'E2E P99 (ms)', num: true, cell: (p) => fmtSec(P.e2e[p.t] && P.e2e[p.t].p99) },
        { label: t('col.e2e_mean_ms'), num: true, cell: (p) => fmtSec(p.e2e_mean_s) },
        { label: t('col.prefix_cache_share'), num: true, cell: (p) => pctCell(p.prefix_cache_share) },
      ], busy) : h('p', { class: 'placeholder' }, t('overview.no_traffic'))));

    // Tokens per business line over the window.
    const rows = (biz.series || []).map((s) => {
      const sum = (k) => s.points.reduce((a, p) => a + (p[k] || 0), 0);
      return { key: s.key.biz_line || '', requests: sum('requests'), input: sum('input_tokens'), cached: sum('cached_input_tokens'), output: sum('output_tokens') };
    }).filter((r) => r.requests > 0).sort((a, b) => b.requests - a.requests);
    out.append(h('div', { class: 'grid2' },
      h('div', { class: 'card', 'data-testid': 'diag-biz-tokens' }, h('h2', {}, t('diag.tokens_by_biz')),
        rows.length ? table([
          { label: t('col.biz_line'), cell: (r) => r.key || dash },
          { label: t('col.requests'), num: true, cell: (r) => fmtInt(r.requests) },
          { label: t('col.input_tokens'), num: true, cell: (r) => fmtInt(r.input) },
          { label: t('col.cached_input_tokens'), num: true, cell: (r) => fmtInt(r.cached) },
          { label: t('col.output_tokens'), num: true, cell: (r) => fmtInt(r.output) },
          { label: t('col.output_per_request'), num: true, cell: (r) => (r.requests ? (r.output / r.requests).toFixed(1) : dash) },
        ], rows) : h('p', { class: 'placeholder' }, t('overview.no_traffic'))),
      h('div', { class: 'card', 'data-testid': 'diag-length' }, h('h2', {}, t('diag.length')), h('p', { class: 'hint' }, t('diag.length_hint')),
        len && len.error ? errorBox(len.error) : reportTable(len))));

    // Latency by input length (the first table of `tollgate diagnose`).
    const byInput = dg.error ? null : (dg.results || [])[0];
    out.append(h('div', { class: 'card', 'data-testid': 'diag-input', 'data-api': dg.path }, h('h2', {}, t('diag.by_input')),
      h('p', { class: 'hint' }, t('diag.by_input_hint'), filters.upstream ? ' ' + t('diag.by_input_no_upstream') : ''),
      dg.error ? errorBox(dg.error) : byInput ? reportTable(byInput) : h('p', { class: 'placeholder' }, t('cost.no_data'))));

    // The engines' own gauges, one line per upstream.
    const samples = eng.error ? [] : eng.samples || [];
    const ets = [...new Set(samples.map((x) => x.at))].sort((a, b) => Date.parse(a) - Date.parse(b));
    const ups = [...new Set(samples.map((x) => x.upstream))].sort();
    const gauge = (field, label, scale, color0) => ups.map((u, j) => {
      const m = {};
      for (const x of samples) if (x.upstream === u) m[x.at] = x[field];
      return { label: ups.length > 1 ? `${label} · ${u}` : label, values: ets.map((x) => (isNum(m[x]) ? m[x] * scale : null)), color: COLORS[(color0 + j * 2) % COLORS.length] };
    });
    const [e1, ep1] = chartCard(t('diag.engine_queue'), t('diag.engine_hint'), 'chart-engine-queue');
    const [e2, ep2] = chartCard(t('diag.engine_cache'), '', 'chart-engine-cache');
    const eg = h('div', { class: 'grid2', 'data-testid': 'diag-engine', 'data-samples': String(samples.length) }, e1, e2);
    out.append(eg);
    if (eng.error) ep1.append(errorBox(eng.error));
    else {
      const ex = { xRange: [w.fromMS, w.toMS], markers: marks, spanGaps: true };
      chart(ep1, ets, [...gauge('running', t('diag.engine_running'), 1, 0), ...gauge('waiting', t('diag.engine_waiting'), 1, 1)], Object.assign({ fmt: (v) => v.toFixed(0) }, ex));
      chart(ep2, ets, [...gauge('kv_cache_usage', t('diag.engine_kv'), 100, 2), ...gauge('prefix_cache_hit_rate', t('diag.engine_prefix'), 100, 3)], Object.assign({ unit: '%', fmt: (v) => v.toFixed(1) }, ex));
    }
  }

  // ---- shell ------------------------------------------------------------
  let renderSeq = 0;
  async function render() {
    const seq = ++renderSeq;
    const { page, arg, params } = route();
    document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
    document.querySelectorAll('[data-i18n]').forEach((el) => { el.textContent = t(el.getAttribute('data-i18n')); });
    const zopt = document.querySelector('#zone option[value=store]');
    if (zopt) zopt.textContent = t('zone.store_named', { zone: storeZone });
    document.querySelectorAll('#nav a').forEach((a) => a.classList.toggle('active', a.dataset.page === ({ request: 'requests', reconciliation: 'cost' }[page] || page)));
    const main = document.getElementById('main');
    main.replaceChildren();
    main.dataset.page = page;
    main.dataset.ready = '';
    try {
      switch (page) {
        case 'requests': document.title = t('requests.title') + ' · tollgate'; await pageRequests(main, params); break;
        case 'request': document.title = t('request.title') + ' · tollgate'; await pageRequest(main, arg); break;
        case 'cost': document.title = t('cost.title') + ' · tollgate'; await pageCost(main, params); break;
        case 'reconciliation': document.title = t('recon.title') + ' · tollgate'; await pageReconciliation(main, arg); break;
        case 'alerts': document.title = t('alerts.title') + ' · tollgate'; await pageAlerts(main, params); break;
        case 'overview': document.title = t('overview.title') + ' · tollgate'; await pageOverview(main, params); break;
        case 'diagnostics': document.title = t('diag.title') + ' · tollgate'; await pageDiagnostics(main, params); break;
        default: main.append(h('p', { class: 'placeholder' }, t('common.no_page'))); break;
      }
    } finally {
      // Tests wait for this: the page has drawn what it fetched.
      if (seq === renderSeq) { main.dataset.ready = page; scheduleRefresh(); }
    }
  }

  async function loadLang(l) {
    const resp = await fetch('i18n/' + l + '.json');
    if (!resp.ok) throw new Error('catalogue ' + l + ': ' + resp.status);
    M = await resp.json();
    lang = l;
  }
  function pickLang() {
    const fromURL = new URLSearchParams(location.search).get('lang');
    if (LANGS.includes(fromURL)) return fromURL;
    const saved = localStorage.getItem('tollgate.lang');
    if (LANGS.includes(saved)) return saved;
    return (navigator.languages || [navigator.language]).some((l) => /^zh/i.test(l || '')) ? 'zh' : 'en';
  }

  // The zone and the refresh interval live in the URL's query (?tz=,
  // ?refresh=), as the language does: they hold across pages.
  function setQuery(k, v) {
    const u = new URL(location.href);
    if (v) u.searchParams.set(k, v); else u.searchParams.delete(k);
    history.replaceState(null, '', u);
  }
  function readShell() {
    const q = new URLSearchParams(location.search);
    zoneChoice = ZONES.includes(q.get('tz')) ? q.get('tz') : 'browser';
    const r = q.get('refresh');
    refreshEvery = REFRESH[r] ? r : '';
  }
  const REFRESH = { '10s': 10e3, '30s': 30e3, '1m': 60e3 };
  let refreshEvery = '', refreshTimer = null;
  // scheduleRefresh re-renders the page after the chosen interval (pages
  // with a named range move with now; a custom one is reread as it is).
  function scheduleRefresh() {
    clearTimeout(refreshTimer);
    const { page } = route();
    if (!refreshEvery || page === 'request' || page === 'reconciliation') return;
    refreshTimer = setTimeout(() => { if (!document.querySelector('#main form :focus')) render(); else scheduleRefresh(); }, REFRESH[refreshEvery]);
  }
  // tokenPanel: change or forget the API token kept in this browser.
  function tokenPanel() {
    const old = document.getElementById('token-panel');
    if (old) { old.remove(); return; }
    const input = h('input', { type: 'password', placeholder: t('token.placeholder'), 'aria-label': t('token.placeholder') });
    const has = !!localStorage.getItem('tollgate.token');
    const panel = h('div', { class: 'card token-panel', id: 'token-panel', 'data-testid': 'token-panel' },
      h('p', { class: 'hint' }, has ? t('token.saved') : t('token.none_saved')),
      h('form', { onsubmit: (e) => { e.preventDefault(); if (input.value.trim()) localStorage.setItem('tollgate.token', input.value.trim()); panel.remove(); render(); } },
        input, ' ', h('button', { type: 'submit' }, t('token.save')), ' ',
        h('button', { type: 'button', class: 'plain', 'data-testid': 'logout', onclick: () => { localStorage.removeItem('tollgate.token'); panel.remove(); render(); } }, t('token.logout'))));
    document.body.insertBefore(panel, document.getElementById('main'));
  }

  async function start() {
    readShell();
    await loadLang(pickLang());
    try { const r = await api('reports'); if (r && r.zone) storeZone = r.zone; } catch (e) { /* no token yet: the store's zone shows as UTC */ }
    const zsel = document.getElementById('zone');
    zsel.value = zoneChoice;
    zsel.addEventListener('change', () => { zoneChoice = zsel.value; setQuery('tz', zoneChoice === 'browser' ? '' : zoneChoice); render(); });
    const rsel = document.getElementById('refresh');
    rsel.value = refreshEvery;
    rsel.addEventListener('change', () => { refreshEvery = rsel.value; setQuery('refresh', refreshEvery); scheduleRefresh(); });
    document.getElementById('token-btn').addEventListener('click', tokenPanel);
    const sel = document.getElementById('lang');
    sel.value = lang;
    sel.addEventListener('change', async () => {
      await loadLang(sel.value);
      localStorage.setItem('tollgate.lang', lang);
      const u = new URL(location.href);
      u.searchParams.set('lang', lang);
      history.replaceState(null, '', u);
      render();
    });
    window.addEventListener('hashchange', render);
    render();
  }
  start();
})();
