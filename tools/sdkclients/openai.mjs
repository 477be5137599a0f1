// OpenAI's node SDK against tollgate's /v1/responses: responses.create and
// responses.stream, one JSON line per call on stdout with what the SDK
// reported (usage, id), what its stream accumulator built, and when the
// first delta arrived. TestNodeSDKs (internal/gateway) runs it.
//
//   node openai.mjs BASE_URL MODEL     (BASE_URL ends in /v1)
//
// OPENAI_API_KEY is the key; SDK_HEADERS, a JSON object, adds headers to
// every request (the simulator's X-Sim-* knobs).
import OpenAI from 'openai';

const [baseURL, model] = process.argv.slice(2);
if (!baseURL || !model) {
  console.error('usage: node openai.mjs BASE_URL MODEL');
  process.exit(2);
}
const client = new OpenAI({
  baseURL,
  apiKey: process.env.OPENAI_API_KEY ?? 'sk-sdk',
  maxRetries: 0,
  defaultHeaders: JSON.parse(process.env.SDK_HEADERS ?? '{}'),
});

const weather = {
  type: 'function',
  name: 'get_weather',
  description: 'Weather',
  parameters: { type: 'object', required: ['city'], properties: { city: { type: 'string' } } },
  strict: false,
};

// The SDK's usage, as it reported it.
function usage(u) {
  return {
    input: u?.input_tokens ?? 0,
    cached: u?.input_tokens_details?.cached_tokens ?? 0,
    output: u?.output_tokens ?? 0,
    reasoning: u?.output_tokens_details?.reasoning_tokens ?? 0,
  };
}

// What the final response holds: its text and its function calls'
// arguments. The text is joined as the SDK's output_text is, which a
// streamed final response lacks.
function output(r) {
  return {
    text: r.output.filter((o) => o.type === 'message').flatMap((o) => o.content)
      .filter((c) => c.type === 'output_text').map((c) => c.text).join(''),
    tool_calls: r.output.filter((o) => o.type === 'function_call').map((o) => ({ name: o.name, arguments: o.arguments })),
  };
}

async function create(name, params) {
  const t0 = performance.now();
  const r = await client.responses.create(params);
  const elapsed = performance.now() - t0;
  return { call: name, id: r.id, usage: usage(r.usage), ...output(r), elapsed_ms: elapsed };
}

// stream records the first delta of any output (text, reasoning summary,
// function arguments) and the first text delta, and what the SDK's
// accumulator held at the last delta of each output item (its snapshot),
// before the final response replaced it.
async function stream(name, params) {
  const t0 = performance.now();
  let firstDelta, firstText;
  const snapshots = {};
  const s = client.responses.stream(params);
  s.on('event', (ev) => {
    if (firstDelta === undefined && /^response\.(output_text|function_call_arguments|reasoning_summary_text|reasoning_text|refusal)\.delta$/.test(ev.type)) {
      firstDelta = performance.now() - t0;
    }
  });
  s.on('response.output_text.delta', (ev) => {
    firstText ??= performance.now() - t0;
    snapshots[`${ev.output_index}/${ev.content_index}`] = ev.snapshot;
  });
  s.on('response.function_call_arguments.delta', (ev) => {
    snapshots[`${ev.output_index}`] = ev.snapshot;
  });
  const r = await s.finalResponse();
  const elapsed = performance.now() - t0;
  const accumulated = Object.keys(snapshots).sort().map((k) => snapshots[k]);
  return {
    call: name, id: r.id, usage: usage(r.usage), ...output(r), accumulated,
    first_delta_ms: firstDelta ?? null, first_text_ms: firstText ?? null, elapsed_ms: elapsed,
  };
}

const instructions = 'You are a careful assistant for a shoe shop. '.repeat(40);
const calls = [
  () => create('responses.create', { model, instructions, input: 'Name three colours.', reasoning: { effort: 'low' }, safety_identifier: 'cust-node' }),
  () => stream('responses.stream', { model, instructions, input: 'Name three colours.', reasoning: { effort: 'low', summary: 'auto' }, safety_identifier: 'cust-node' }),
  () => stream('responses.stream tool call', { model, instructions, input: 'Weather in Paris?', tools: [weather], tool_choice: 'required', safety_identifier: 'cust-node' }),
];
for (const call of calls) {
  console.log(JSON.stringify(await call()));
}
