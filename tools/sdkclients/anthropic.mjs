// Anthropic's node SDK against tollgate's /v1/messages: messages.create
// and messages.stream, with text and with a tool call, one JSON line per
// call on stdout with what the SDK reported (usage, id), what its stream
// accumulator built (finalMessage) and when the first delta arrived.
// TestNodeSDKs (internal/gateway) runs it.
//
//   node anthropic.mjs BASE_URL MODEL     (BASE_URL without /v1: the SDK adds it)
//
// ANTHROPIC_API_KEY is the key; SDK_HEADERS, a JSON object, adds headers
// to every request (the simulator's X-Sim-* knobs).
import Anthropic from '@anthropic-ai/sdk';

const [baseURL, model] = process.argv.slice(2);
if (!baseURL || !model) {
  console.error('usage: node anthropic.mjs BASE_URL MODEL');
  process.exit(2);
}
const client = new Anthropic({
  baseURL,
  apiKey: process.env.ANTHROPIC_API_KEY ?? 'sk-sdk',
  maxRetries: 0,
  defaultHeaders: JSON.parse(process.env.SDK_HEADERS ?? '{}'),
});

const weather = {
  name: 'get_weather',
  description: 'Weather',
  input_schema: { type: 'object', required: ['city'], properties: { city: { type: 'string' } } },
};
// Long enough to be cached, with a breakpoint: the first call writes the
// cache, the later ones read it.
const system = [{ type: 'text', text: 'You are a careful assistant for a shoe shop. '.repeat(200), cache_control: { type: 'ephemeral' } }];

// The SDK's usage, as it reported it.
function usage(u) {
  return {
    input: u.input_tokens ?? 0,
    cache_creation: u.cache_creation_input_tokens ?? 0,
    cache_read: u.cache_read_input_tokens ?? 0,
    output: u.output_tokens ?? 0,
    reasoning: u.output_tokens_details?.thinking_tokens ?? 0,
  };
}

// What the message holds: its text blocks joined, and its tool calls
// with their input as the SDK parsed it.
function output(m) {
  return {
    text: m.content.filter((b) => b.type === 'text').map((b) => b.text).join(''),
    tool_calls: m.content.filter((b) => b.type === 'tool_use').map((b) => ({ name: b.name, arguments: JSON.stringify(b.input) })),
    stop_reason: m.stop_reason,
  };
}

async function create(name, params) {
  const t0 = performance.now();
  const m = await client.messages.create(params);
  const elapsed = performance.now() - t0;
  return { call: name, id: m.id, usage: usage(m.usage), ...output(m), elapsed_ms: elapsed };
}

async function stream(name, params) {
  const t0 = performance.now();
  let firstDelta, firstText;
  const s = client.messages.stream(params);
  s.on('streamEvent', (ev) => {
    if (ev.type === 'content_block_delta') {
      firstDelta ??= performance.now() - t0;
      if (ev.delta.type === 'text_delta') firstText ??= performance.now() - t0;
    }
  });
  const m = await s.finalMessage();
  const elapsed = performance.now() - t0;
  return {
    call: name, id: m.id, usage: usage(m.usage), ...output(m),
    first_delta_ms: firstDelta ?? null, first_text_ms: firstText ?? null, elapsed_ms: elapsed,
  };
}

const base = { model, max_tokens: 256, system, tools: [weather], metadata: { user_id: 'cust-node' } };
const calls = [
  () => create('messages.create', { ...base, tool_choice: { type: 'none' }, messages: [{ role: 'user', content: 'Hello' }] }),
  () => create('messages.create tool call', { ...base, tool_choice: { type: 'any' }, messages: [{ role: 'user', content: 'Weather in Rome?' }] }),
  () => stream('messages.stream', { ...base, tool_choice: { type: 'none' }, messages: [{ role: 'user', content: 'Hello again' }] }),
  () => stream('messages.stream tool call', { ...base, tool_choice: { type: 'any' }, messages: [{ role: 'user', content: 'Weather in Oslo?' }] }),
];
for (const call of calls) {
  console.log(JSON.stringify(await call()));
}
