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
  const fmtInt = (v) => (isNum(v) ? String(Math.round(v)) : dash);
  const fmtRate = (v) => (isNum(v) ? v.toFixed(1) : dash);
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  function fmtTime(s) {
    if (!s) return dash;
    const d = new Date(s);
    if (isNaN(d)) return s;
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
  }
  const fmtCost = (c) => (c && c.currency ? `${c.amount} ${c.currency}` : c && c.nanos ? c.amount : dash);

  // ---- URL state --------------------------------------------------------
  function route() {
    const raw = location.hash.replace(/^#\/?/, '');
    const [path, query] = raw.split('?');
    const parts = path.split('/').map(decodeURIComponent);
    return { page: parts[0] || 'requests', arg: parts.slice(1).join('/'), params: new URLSearchParams(query || '') };
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
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
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
      throw new APIError(resp.status, err.code || '', err.message || resp.statusText);
    }
    return body;
  }
  function errorBox(err) {
    const box = h('div', { class: 'error', 'data-testid': 'error' }, h('strong', {}, t('error.title')), ' ', err.message || String(err));
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
  function table(cols, rows, attrs) {
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
  async function pageRequests(main, params) {
    const get = (k, d = '') => params.get(k) || d;
    const range = get('range', '24h');
    const field = (name, label, extra) => h('label', {}, label, h('input', Object.assign({ name, value: get(name) }, extra || {})));
    const rangeSel = h('select', { name: 'range' }, [...Object.keys(RANGES), 'custom'].map((r) => h('option', { value: r, selected: r === range }, rangeLabel(r))));
    const slowSel = h('select', { name: 'slow' }, ['', '500ms', '1s', '2s', '5s', '10s', '30s'].map((v) =>
      h('option', { value: v, selected: v === get('slow') }, v ? t('requests.slower_than', { d: v }) : t('requests.any_speed'))));
    const form = h('form', { class: 'filters', 'data-testid': 'filters' },
      h('label', {}, t('filter.range'), rangeSel),
      field('since', t('filter.since'), { placeholder: '2026-11-01T08:00:00Z', size: 22 }),
      field('until', t('filter.until'), { placeholder: '2026-11-01T09:00:00Z', size: 22 }),
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
      if ((o.since || o.until) && o.range !== 'custom') o.range = 'custom';
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
      { label: t('col.user'), cell: (r) => r.user_id || dash },
      { label: t('col.biz_line'), cell: (r) => r.biz_line || dash },
      { label: t('col.model'), cell: (r) => r.model },
      { label: t('col.status'), cell: (r) => statusCell(r) },
      { label: t('col.ttft_ms'), num: true, cell: (r) => h('span', { 'data-testid': 'ttft' }, fmtMS(r.timing.ttft_ms)) },
      { label: t('col.e2e_ms'), num: true, cell: (r) => h('span', { 'data-testid': 'e2e' }, fmtMS(r.timing.e2e_ms)) },
      { label: t('col.input_tokens'), num: true, cell: (r) => fmtInt(r.usage.input_tokens) },
      { label: t('col.output_tokens'), num: true, cell: (r) => h('span', { 'data-testid': 'output-tokens' }, fmtInt(r.usage.output_tokens)) },
      { label: t('col.cost'), num: true, cell: (r) => fmtCost(r.cost) },
    ];
    const note = recs.length >= Number(limit) ? t('requests.capped', { n: recs.length }) : t('requests.count', { n: recs.length });
    out.replaceChildren(h('p', { class: 'muted', 'data-testid': 'count' }, note),
      recs.length ? table(cols, recs, { 'data-testid': 'requests' }) : h('p', { class: 'placeholder' }, t('requests.none')));
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
  function sourceHelp(s) {
    switch (s) {
      case 'engine': return t('usage.source.engine');
      case 'tokenizer': return t('usage.source.tokenizer');
      case 'merged': return t('usage.source.merged');
      case 'chunks': return t('usage.source.chunks');
      default: return t('usage.source.none');
    }
  }
  const figure = (label, value, unit, id) => h('div', { class: 'figure' }, h('div', { class: 'label' }, label),
    h('div', {}, h('span', { class: 'value', 'data-testid': id || null }, value), unit && value !== dash ? h('span', { class: 'unit' }, unit) : null));
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

    // The waterfall: segments in the order of the request's timeline, each
    // bar placed after the previous one, drawn to the scale of E2E.
    const segs = r.segments || {};
    const total = tm.e2e_ms > 0 ? tm.e2e_ms : SEGMENTS.reduce((a, s) => a + (segs[s] || 0), 0) || 1;
    let at = 0;
    const rows = SEGMENTS.map((s) => {
      const v = segs[s] || 0;
      const left = (at / total) * 100, width = (v / total) * 100;
      at += v;
      return h('div', { class: 'wf-row', 'data-segment': s },
        h('span', {}, segLabel(s)),
        h('div', { class: 'wf-track' }, v > 0 ? h('div', { class: 'wf-bar seg-' + s, style: `left:${left.toFixed(3)}%;width:${width.toFixed(3)}%`, title: `${segLabel(s)} ${fmtMS(v)} ms` }) : null),
        h('span', { class: 'num' }, fmtMS(v) + ' ms'),
        h('span', { class: 'muted' }, (r.segments_source || {})[s] || ''));
    });
    main.append(h('div', { class: 'card', 'data-testid': 'waterfall' }, h('h2', {}, t('request.waterfall')),
      h('p', { class: 'hint' }, t('request.waterfall_hint')), rows,
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
          kv([[t('usage.input'), fmtInt(r.usage.input_tokens)], [t('usage.cached'), fmtInt(r.usage.cached_input_tokens)],
            [t('usage.output'), fmtInt(r.usage.output_tokens)], [t('usage.reasoning'), fmtInt(r.usage.reasoning_tokens)],
            [t('usage.total'), fmtInt(r.usage.input_tokens + r.usage.output_tokens)],
            [t('usage.source'), h('span', {}, h('code', { 'data-testid': 'usage-source' }, r.usage.source), ' — ', sourceHelp(r.usage.source))]])),
        h('div', { class: 'card', 'data-testid': 'cost' }, h('h2', {}, t('request.cost')),
          kv([[t('cost.amount'), fmtCost(r.cost)], [t('cost.price_version'), r.cost.price_version || t('cost.no_price')]])))));

    main.append(h('div', { class: 'grid2' },
      h('div', { class: 'card', 'data-testid': 'result' }, h('h2', {}, t('request.result')),
        kv([[t('result.status'), String(r.status)], [t('result.upstream_status'), r.upstream_status ? String(r.upstream_status) : dash],
          [t('result.error_type'), r.error_type], [t('result.error_message'), r.error_message], [t('result.finish_reason'), r.finish_reason],
          [t('result.attempt'), String(r.attempt)], [t('result.retries'), String(r.retries)],
          [t('result.stream'), r.stream ? t('common.yes') : t('common.no')],
          [t('result.cache_hit'), r.cache_hit ? t('common.yes') : t('common.no')],
          [t('result.prefix_cache_hit'), r.prefix_cache_hit ? t('common.yes') : t('common.no')]])),
      h('div', { class: 'card', 'data-testid': 'identity' }, h('h2', {}, t('request.identity')),
        kv([[t('id.trace_id'), h('code', { 'data-testid': 'trace-id' }, r.trace_id)], [t('id.logical_request_id'), r.logical_request_id],
          [t('id.user'), r.user_id], [t('id.key_id'), r.key_id], [t('id.biz_line'), r.biz_line], [t('id.team'), r.team],
          [t('id.session'), r.session_id], [t('id.template'), r.template_id], [t('id.endpoint'), r.endpoint],
          [t('id.model'), r.model], [t('id.served_model'), r.served_model], [t('id.upstream'), r.upstream], [t('id.engine'), r.engine]]))));

    if (r.engine_timing) {
      const e = r.engine_timing;
      main.append(h('div', { class: 'card', 'data-testid': 'engine' }, h('h2', {}, t('request.engine')),
        kv([[t('engine.signal'), e.signal], [t('engine.queue'), fmtMS(e.queue_ms)], [t('engine.ttft'), fmtMS(e.ttft_ms)],
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
    const width = Math.max(320, Math.min(1100, el.parentElement.clientWidth - 32));
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
      default: return name;
    }
  }
  function reportTable(res) {
    if (!res.rows || !res.rows.length) return h('p', { class: 'placeholder' }, t('cost.no_data'));
    const NUM = ['int', 'float', 'money', 'percent'];
    const cols = res.columns.map((c) => ({
      label: colLabel(c.name), num: NUM.includes(c.kind),
      cell: (row) => {
        const v = row[c.name];
        if (c.kind === 'percent' && isNum(v)) return (v * 100).toFixed(1) + ' %';
        if (c.kind === 'float' && isNum(v)) return v.toFixed(1);
        return v === null || v === undefined || v === '' ? dash : String(v);
      },
    }));
    return table(cols, res.rows);
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
    const q = new URLSearchParams();
    for (const k of ['from', 'to', 'user', 'biz_line', 'model']) if (params.get(k)) q.set(k, params.get(k));
    const sections = [['top', t('cost.top'), t('cost.top_hint')], ['users', t('cost.users'), ''], ['biz', t('cost.biz'), '']];
    const cards = sections.map(([kind, title, hint]) => {
      const body = h('div', {}, h('p', { class: 'muted' }, t('common.loading')));
      main.append(h('div', { class: 'card', 'data-testid': 'report-' + kind }, h('h2', {}, title), hint ? h('p', { class: 'hint' }, hint) : null, body));
      return [kind, body];
    });
    await Promise.all(cards.map(async ([kind, body]) => {
      try {
        const res = await api('reports/' + kind + '?' + q.toString());
        body.replaceChildren(h('p', { class: 'hint' }, t('cost.period', { from: res.from, to: res.to })), reportTable(res));
      } catch (err) { body.replaceChildren(errorBox(err)); }
    }));
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
  async function pageAlerts(main, params) {
    main.append(h('h1', {}, t('alerts.title')));
    let data;
    try { data = await api('alerts' + (params.get('since') ? '?since=' + encodeURIComponent(params.get('since')) : '')); } catch (err) { main.append(errorBox(err)); return; }
    const active = data.active || [];
    main.append(h('div', { class: 'card', 'data-testid': 'alerts-active' }, h('h2', {}, t('alerts.active', { n: active.length })),
      active.length ? table([
        { label: t('col.severity'), cell: (a) => h('span', { class: 'badge ' + a.severity }, a.severity) },
        { label: t('col.state'), cell: (a) => h('span', { class: 'badge ' + a.state }, a.state) },
        { label: t('col.rule'), cell: (a) => a.rule },
        { label: t('col.labels'), cell: (a) => labelsText(a.labels) },
        { label: t('col.summary'), cell: (a) => h('span', { style: 'white-space:normal' }, a.summary) },
        { label: t('col.value'), num: true, cell: (a) => `${+a.value.toPrecision(4)} / ${+a.threshold.toPrecision(4)} ${a.unit || ''}` },
        { label: t('col.since'), cell: (a) => fmtTime(a.starts_at) },
        { label: '', cell: (a) => requestsLink(a.link) },
      ], active) : h('p', { class: 'placeholder' }, t('alerts.none_active'))));
    const hist = data.history || [];
    main.append(h('div', { class: 'card', 'data-testid': 'alerts-history' }, h('h2', {}, t('alerts.history')), h('p', { class: 'hint' }, t('alerts.history_hint')),
      hist.length ? table([
        { label: t('col.at'), cell: (e) => fmtTime(e.At) },
        { label: t('col.subject'), cell: (e) => e.Subject },
        { label: t('col.summary'), cell: (e) => h('span', { style: 'white-space:normal' }, e.Message) },
        { label: '', cell: (e) => { try { return requestsLink(JSON.parse(e.Data || '{}').link); } catch (x) { return null; } } },
      ], hist) : h('p', { class: 'placeholder' }, t('alerts.none_history'))));
  }

  // ---- pages still to come ----------------------------------------------
  function pageLater(main, title, what) {
    main.append(h('h1', {}, title), h('div', { class: 'card placeholder', 'data-testid': 'later' }, what));
  }

  // ---- shell ------------------------------------------------------------
  let renderSeq = 0;
  async function render() {
    const seq = ++renderSeq;
    const { page, arg, params } = route();
    document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
    document.querySelectorAll('[data-i18n]').forEach((el) => { el.textContent = t(el.getAttribute('data-i18n')); });
    document.querySelectorAll('#nav a').forEach((a) => a.classList.toggle('active', a.dataset.page === (page === 'request' ? 'requests' : page)));
    const main = document.getElementById('main');
    main.replaceChildren();
    main.dataset.page = page;
    main.dataset.ready = '';
    try {
      switch (page) {
        case 'requests': document.title = t('requests.title') + ' · tollgate'; await pageRequests(main, params); break;
        case 'request': document.title = t('request.title') + ' · tollgate'; await pageRequest(main, arg); break;
        case 'cost': document.title = t('cost.title') + ' · tollgate'; await pageCost(main, params); break;
        case 'alerts': document.title = t('alerts.title') + ' · tollgate'; await pageAlerts(main, params); break;
        case 'overview': document.title = t('nav.overview') + ' · tollgate'; pageLater(main, t('nav.overview'), t('later.overview')); break;
        case 'diagnostics': document.title = t('nav.diagnostics') + ' · tollgate'; pageLater(main, t('nav.diagnostics'), t('later.diagnostics')); break;
        default: main.append(h('p', { class: 'placeholder' }, t('common.no_page'))); break;
      }
    } finally {
      // Tests wait for this: the page has drawn what it fetched.
      if (seq === renderSeq) main.dataset.ready = page;
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

  async function start() {
    await loadLang(pickLang());
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
