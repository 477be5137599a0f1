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
      { label: t('col.input_tokens'), num: true, cell: (r) => h('span', { 'data-testid': 'input-tokens' }, inputTokens(r.usage, r.usage.input_tokens)) },
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
  // inputTokens shows an input figure (n) of usage u, or "unknown" when
  // nobody counted the input: its 0 in the JSON is not a count.
  function inputTokens(u, n) {
    return u.input_unknown ? t('usage.unknown') : fmtInt(n);
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
        h('span', { class: 'muted' }, pending && src.startsWith('inferred:') ? src + ' — ' + t('request.engine_pending_short') : src));
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
      case 'finding': return t('col.finding');
      case 'subject': return t('col.waste_subject');
      case 'share': return t('col.share');
      case 'est_cost': return t('col.est_cost');
      case 'detail': return t('col.detail');
      case 'ttft_p50_ms': return 'TTFT P50 (ms)';
      case 'ttft_p95_ms': return 'TTFT P95 (ms)';
      case 'ttft_p99_ms': return 'TTFT P99 (ms)';
      case 'e2e_p50_ms': return 'E2E P50 (ms)';
      case 'e2e_p99_ms': return 'E2E P99 (ms)';
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
        h('td', { class: 'num', 'data-testid': 'burn-share' }, fmtPct(u.share) + ' %'));
    });
    const d = list[0];
    return h('div', {},
      h('p', { class: 'hint' }, t('budget.day', { from: fmtTime(d.day_start).slice(0, 16), to: fmtTime(d.day_end).slice(0, 16) })),
      h('table', { 'data-testid': 'budget-table' },
        h('thead', {}, h('tr', {}, h('th', {}, t('budget.scope')), h('th', {}, t('budget.limit')), h('th', { class: 'num' }, t('budget.used_quota')),
          h('th', {}, t('budget.burn')), h('th', { class: 'num' }, t('budget.share')))),
        h('tbody', {}, rows)));
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
    return h('table', { 'data-testid': 'budgets-table' },
      h('thead', {}, h('tr', {}, [t('budgets.name'), t('budget.scope'), t('budgets.period'), t('budget.used_quota'), t('budget.burn'), t('budget.share'), t('budgets.thresholds')]
        .map((l, i) => h('th', { class: i === 3 || i === 5 ? 'num' : null }, l)))),
      h('tbody', {}, rows));
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
    return h('table', { 'data-testid': 'recon-table' },
      h('thead', {}, h('tr', {}, cols.map((c) => h('th', { class: c.num ? 'num' : null }, c.label)))),
      h('tbody', {}, runs.map((r) => h('tr', { 'data-run-id': String(r.id), class: r.over_tolerance ? 'recon-over' : null },
        cols.map((c) => h('td', { class: c.num ? 'num' : null }, c.cell(r)))))));
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
      lines.length ? h('table', { 'data-testid': 'recon-lines-table' },
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
          h('td', { style: 'white-space:normal' }, (ln.notes || []).join(' '))))))
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
    await Promise.all([loadBudget(), loadBudgets(), loadRecon(), ...cards.map(async ([kind, body]) => {
      try {
        const res = await api('reports/' + kind + '?' + q.toString());
        body.replaceChildren(h('p', { class: 'hint' }, t('cost.period', { from: res.from, to: res.to })), reportTable(res));
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
    return { range, from, to, fromISO: iso(fromMS), toISO: iso(toMS), step };
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
    const series = [{ label: t('col.bucket') }].concat(order.map((i) => ({
      label: lines[i].label, stroke: lines[i].color, width: 2,
      fill: opts.stacked ? lines[i].color : undefined, spanGaps: !!opts.spanGaps,
      points: { show: true, size: xs.length < 60 ? 5 : 3 }, // a lone value between gaps is a point, not a line
      value: (u, v, si, idx) => { const raw = lines[i].values[idx]; return isNum(raw) ? (opts.fmt || String)(raw) : dash; },
    })));
    const width = Math.max(320, Math.min(1300, (el.parentElement ? el.parentElement.clientWidth : 640) - 32));
    const u = new uPlot({
      width, height: opts.height || 220,
      // Tick labels to six significant digits: uPlot's own rounding could
      // print 0.0025 and 0.002 both as "0.002" on small rates.
      axes: [{}, { label: opts.unit || '', size: 60, values: (u, splits) => splits.map((v) => (v == null ? '' : String(Number(v.toPrecision(6))))) }],
      scales: { y: { range: (u, mn, mx) => [0, mx > 0 ? mx * 1.1 : 1] } },
      series, legend: { show: true },
    }, [xs].concat(order.map((i) => data[i])), el);
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
      h('label', {}, t('filter.since'), h('input', { name: 'from', value: w.from, placeholder: '2026-11-01T08:00:00Z', size: 22 })),
      h('label', {}, t('filter.until'), h('input', { name: 'to', value: w.to, placeholder: '2026-11-01T09:00:00Z', size: 22 })),
      h('label', {}, t('filter.step'), stepSel),
      (extra || []).map((k) => h('label', {}, filterLabel(k), h('input', { name: k, value: params.get(k) || '' }))),
      h('button', { type: 'submit' }, t('common.show')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const fd = new FormData(form), o = {};
      for (const k of ['range', 'from', 'to', 'step', ...(extra || [])]) o[k] = (fd.get(k) || '').trim();
      if ((o.from || o.to) && o.range !== 'custom') o.range = 'custom';
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
  async function pageOverview(main, params) {
    const w = window_(params, '24h');
    main.append(h('h1', {}, t('overview.title')), h('div', { class: 'card' }, rangeForm('overview', w, params), h('p', { class: 'hint' }, t('overview.hint'))));
    const out = h('div', {}, h('p', { class: 'muted' }, t('common.loading')));
    main.append(out);
    const span = `from=${encodeURIComponent(w.fromISO)}&to=${encodeURIComponent(w.toISO)}`;
    const ovPath = 'overview?' + span;
    let ov, se, pe, pt;
    try {
      [ov, se, pe, pt] = await Promise.all([api(ovPath), api(`series?${span}&step=${w.step}&measures=requests,errors`),
        tryAPI(`percentiles?${span}&step=${w.step}&quantity=e2e`), tryAPI(`percentiles?${span}&step=${w.step}&quantity=ttft`)]);
    } catch (err) { out.replaceChildren(errorBox(err)); return; }
    const T = ov.totals || {}, L = ov.latency_s || {}, e2e = L.e2e || {}, ttft = L.ttft || {};
    out.replaceChildren();
    out.append(h('p', { class: 'hint', 'data-testid': 'period' }, t('overview.period', { from: fmtTime(ov.from), to: fmtTime(ov.to) })));
    out.append(h('div', { class: 'figures card', 'data-testid': 'ov-figures', 'data-api': ovPath },
      figure(t('ov.requests'), fmtInt(T.requests), '', 'ov-requests'),
      figure(t('ov.qps'), fmtQPS(ov.qps), t('unit.per_s'), 'ov-qps'),
      figure(t('ov.error_rate'), fmtPct(T.error_rate), '%', 'ov-error-rate'),
      figure(t('ov.e2e_p50'), fmtSec(e2e.p50), 'ms', 'ov-e2e-p50'),
      figure(t('ov.e2e_p95'), fmtSec(e2e.p95), 'ms', 'ov-e2e-p95'),
      figure(t('ov.e2e_p99'), fmtSec(e2e.p99), 'ms', 'ov-e2e-p99'),
      figure(t('ov.ttft_p50'), fmtSec(ttft.p50), 'ms', 'ov-ttft-p50'),
      figure(t('ov.ttft_p95'), fmtSec(ttft.p95), 'ms', 'ov-ttft-p95'),
      figure(t('ov.ttft_p99'), fmtSec(ttft.p99), 'ms', 'ov-ttft-p99'),
      figure(t('ov.input_tokens'), fmtInt(T.input_tokens), t('unit.tokens'), 'ov-input-tokens'),
      figure(t('ov.output_tokens'), fmtInt(T.output_tokens), t('unit.tokens'), 'ov-output-tokens'),
      figure(t('ov.cache_hit_share'), fmtPct(T.cache_hit_share), '%', 'ov-cache'),
      figure(t('ov.cost'), fmtCosts(T.cost), '', 'ov-cost'),
      figure(t('ov.alerts'), h('a', { href: '#/alerts' }, fmtInt((ov.alerts || {}).active)), '', 'ov-alerts')));
    if (!isNum(e2e.p50) && T.requests) out.append(h('p', { class: 'hint' }, t('overview.no_percentiles')));

    const sp = pointsOf(se), ts = sp.map((p) => p.t);
    const pick = (i) => { if (sp[i]) location.hash = href('diagnostics', '', diagParams(sp[i].t, w.step)); };
    const byT = (res) => { const m = {}; for (const p of pointsOf(res)) m[p.t] = p; return m; };
    const e2eT = byT(pe), ttftT = byT(pt);
    const [c1, p1] = chartCard(t('overview.chart_qps'), t('overview.chart_click'), 'chart-qps');
    const [c2, p2] = chartCard(t('overview.chart_errors'), '', 'chart-errors');
    const [c3, p3] = chartCard(t('overview.chart_p99'), '', 'chart-p99');
    out.append(c1, h('div', { class: 'grid2' }, c2, c3));
    chart(p1, ts, [{ label: t('ov.qps'), values: sp.map((p) => p.qps), color: COLORS[0] }], { unit: t('unit.per_s'), fmt: fmtQPS, onPick: pick });
    chart(p2, ts, [{ label: t('ov.error_rate'), values: sp.map((p) => (isNum(p.error_rate) ? p.error_rate * 100 : null)), color: COLORS[2] }], { unit: '%', fmt: (v) => v.toFixed(1), onPick: pick });
    chart(p3, ts, [
      { label: t('ov.e2e_p99'), values: ts.map((x) => (e2eT[x] && isNum(e2eT[x].p99) ? e2eT[x].p99 * 1000 : null)), color: COLORS[0] },
      { label: t('ov.ttft_p99'), values: ts.map((x) => (ttftT[x] && isNum(ttftT[x].p99) ? ttftT[x].p99 * 1000 : null)), color: COLORS[1] },
    ], { unit: 'ms', fmt: (v) => v.toFixed(1), onPick: pick });

    // The buckets with traffic, each a link to its diagnostics: the same
    // drill-down as a click on a chart, without aiming at a point.
    const busy = sp.filter((p) => p.requests > 0).reverse().slice(0, 60);
    out.append(h('div', { class: 'card', 'data-testid': 'ov-buckets' }, h('h2', {}, t('overview.buckets', { step: w.step })), h('p', { class: 'hint' }, t('overview.buckets_hint')),
      busy.length ? table([
        { label: t('col.bucket'), cell: (p) => h('a', { href: href('diagnostics', '', diagParams(p.t, w.step)), 'data-testid': 'bucket-link', 'data-t': p.t }, fmtBucket(p.t)) },
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
        { label: t('col.error_rate'), num: true, cell: (r) => fmtPct(r.error_rate) + ' %' },
        { label: t('col.cache_hit_share'), num: true, cell: (r) => fmtPct(r.cache_hit_share) + ' %' },
        { label: t('col.input_tokens'), num: true, cell: (r) => fmtInt(r.input_tokens) },
        { label: t('col.output_tokens'), num: true, cell: (r) => fmtInt(r.output_tokens) },
        { label: t('col.e2e_mean_ms'), num: true, cell: (r) => fmtSec(r.e2e_mean_s) },
        { label: t('col.ttft_mean_ms'), num: true, cell: (r) => fmtSec(r.ttft_mean_s) },
        { label: t('col.cost'), num: true, cell: (r) => fmtCosts(r.cost) },
      ], g.top) : h('p', { class: 'placeholder' }, t('overview.no_traffic')));
    out.append(h('div', { class: 'grid2' }, groupTable('biz_line', ov.by_biz_line, 'ov-by-biz'), groupTable('model', ov.by_model, 'ov-by-model')));
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
    const out = h('div', {}, h('p', { class: 'muted' }, t('common.loading')));
    main.append(out);
    const Q = ['ttft', 'tpot', 'e2e', 'gateway_queue', 'engine_queue'];
    let se, biz, pct, len, eng, dg;
    try {
      [se, biz, pct] = await Promise.all([
        api(`series?${span}&step=${w.step}${fq}`),
        api(`series?${span}&step=${w.step}&by=biz_line&measures=requests,input_tokens,cached_input_tokens,output_tokens${fq}`),
        Promise.all(Q.map((q) => tryAPI(`percentiles?${span}&step=${w.step}&quantity=${q}${fq}`)))]);
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
    out.append(h('p', { class: 'hint', 'data-testid': 'period' }, t('overview.period', { from: fmtTime(se.from), to: fmtTime(se.to) }), ' · ',
      t('diag.total', { n: total, step: w.step })));
    out.append(h('span', { hidden: true, 'data-testid': 'diag-requests', 'data-api': `series?${span}&step=${w.step}${fq}` }, String(total)));
    const toReq = (i) => { if (sp[i]) location.hash = href('requests', '', requestsParams(sp[i].t, iso(Date.parse(sp[i].t) + STEP_S[w.step] * 1000), filters)); };
    const P = {};
    Q.forEach((q, i) => { P[q] = {}; for (const p of pointsOf(pct[i])) P[q][p.t] = p; });
    const pctLines = (q, label) => ['p50', 'p95', 'p99'].map((k, j) => ({ label: label + ' ' + k.toUpperCase(), values: ts.map((x) => (P[q][x] && isNum(P[q][x][k]) ? P[q][x][k] * 1000 : null)), color: COLORS[j] }));
    const ms = { unit: 'ms', fmt: (v) => v.toFixed(1), onPick: toReq };
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
      [t('diag.chart_cache'), '', 'chart-cache', [{ label: t('ov.cache_hit_share'), values: sp.map((p) => (isNum(p.cache_hit_share) ? p.cache_hit_share * 100 : null)), color: COLORS[3] }],
        { unit: '%', fmt: (v) => v.toFixed(1), onPick: toReq }],
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
        { label: t('col.cache_hit_share'), num: true, cell: (p) => fmtPct(p.cache_hit_share) + ' %' },
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
      chart(ep1, ets, [...gauge('running', t('diag.engine_running'), 1, 0), ...gauge('waiting', t('diag.engine_waiting'), 1, 1)], { fmt: (v) => v.toFixed(0), spanGaps: true });
      chart(ep2, ets, [...gauge('kv_cache_usage', t('diag.engine_kv'), 100, 2), ...gauge('prefix_cache_hit_rate', t('diag.engine_prefix'), 100, 3)], { unit: '%', fmt: (v) => v.toFixed(1), spanGaps: true });
    }
  }

  // ---- shell ------------------------------------------------------------
  let renderSeq = 0;
  async function render() {
    const seq = ++renderSeq;
    const { page, arg, params } = route();
    document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
    document.querySelectorAll('[data-i18n]').forEach((el) => { el.textContent = t(el.getAttribute('data-i18n')); });
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
