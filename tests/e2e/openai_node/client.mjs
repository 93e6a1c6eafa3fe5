// Drives a herd gateway with the official OpenAI Node client (npm `openai`): models,
// completions, chat completions (streaming and not), responses (streaming and not, a
// forced function call and its output in the next turn) and embeddings. Prints one
// "PASS name" / "FAIL name: why" line per check; exits 1 on any failure.
// Usage: node client.mjs BASE_URL MODEL   (BASE_URL like http://127.0.0.1:8080/v1)
import OpenAI from 'openai';

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60000 });
let failures = 0;
function check(name, ok, why = '') {
  console.log(ok ? `PASS ${name}` : `FAIL ${name}: ${why}`);
  if (!ok) failures++;
}

const models = await client.models.list();
check('models.list', models.data.some((m) => m.id === model), JSON.stringify(models.data));
const one = await client.models.retrieve(model);
check('models.retrieve', one.id === model, JSON.stringify(one));

const cmpl = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0 });
check('completions', cmpl.choices[0].text.length > 0 && cmpl.usage.completion_tokens === 16, JSON.stringify(cmpl));

const messages = [
  { role: 'system', content: 'You tell short stories.' },
  { role: 'user', content: 'Tell me about Lily.' },
];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0, seed: 1 });
const text = chat.choices[0].message.content;
check('chat', chat.object === 'chat.completion' && chat.choices[0].message.role === 'assistant' && text.length > 0,
      JSON.stringify(chat));
check('chat usage', chat.usage.completion_tokens === 24 && chat.choices[0].finish_reason === 'length',
      JSON.stringify(chat.usage));

const stream = await client.chat.completions.create({
  model, messages, max_tokens: 24, temperature: 0, seed: 1, stream: true, stream_options: { include_usage: true },
});
let streamed = '';
let finish = null;
let usage = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  for (const c of chunk.choices) {
    streamed += c.delta?.content ?? '';
    if (c.finish_reason) finish = c.finish_reason;
  }
}
check('chat stream equals non-streamed', streamed === text, `${JSON.stringify(streamed)} vs ${JSON.stringify(text)}`);
check('chat stream finish + usage', finish === 'length' && usage?.completion_tokens === 24, `${finish} ${JSON.stringify(usage)}`);

const n2 = await client.chat.completions.create({ model, messages, max_tokens: 8, n: 2, seed: 3 });
check('chat n=2', n2.choices.length === 2 && n2.choices[1].index === 1, JSON.stringify(n2.choices));

// The Responses API: output_text (the SDK's sum of the message items) and usage; the
// streamed deltas equal it at temperature 0, raw and through the SDK's stream helper.
const rbase = { model, instructions: 'You tell short stories.', input: 'Tell me about Lily.', max_output_tokens: 24,
  temperature: 0 };
const resp = await client.responses.create(rbase);
check('responses', resp.object === 'response' && resp.output_text.length > 0 && resp.output[0]?.type === 'message',
      JSON.stringify(resp));
check('responses usage', resp.usage.output_tokens === 24 &&
      resp.usage.total_tokens === resp.usage.input_tokens + 24 && resp.status === 'incomplete' &&
      resp.incomplete_details?.reason === 'max_output_tokens', JSON.stringify(resp));
const rstream = await client.responses.create({ ...rbase, stream: true });
let rtext = '';
let rlast = null;
for await (const ev of rstream) {
  if (ev.type === 'response.output_text.delta') rtext += ev.delta;
  rlast = ev;
}
check('responses stream equals non-streamed', rtext === resp.output_text,
      `${JSON.stringify(rtext)} vs ${JSON.stringify(resp.output_text)}`);
check('responses stream ends with the response', rlast?.type === 'response.incomplete' &&
      rlast.response.usage.output_tokens === 24 && rlast.response.output[0]?.content[0]?.text === rtext,
      JSON.stringify(rlast));
// (this SDK's helper keeps its own snapshot unless the stream ends with response.completed,
// and adds no output_text: compare the text it assembled from the events)
const helper = await client.responses.stream(rbase).finalResponse();
check('responses.stream helper', helper.output[0]?.content[0]?.text === resp.output_text, JSON.stringify(helper));

// A forced function call (flat Responses tools), then its output in the next turn.
const rtools = [{ type: 'function', name: 'get_weather', description: 'The current weather of a city', strict: true,
  parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'London'] } },
    required: ['city'], additionalProperties: false } }];
const input = [{ role: 'user', content: 'What is the weather in Paris?' }];
const fc = await client.responses.create({ model, input, tools: rtools, max_output_tokens: 200, temperature: 0,
  tool_choice: { type: 'function', name: 'get_weather' }, parallel_tool_calls: false });
const call = fc.output.find((o) => o.type === 'function_call');
let args = null;
try {
  args = JSON.parse(call?.arguments);
} catch {}
check('responses function_call', call?.name === 'get_weather' && typeof call.call_id === 'string' &&
      ['Paris', 'London'].includes(args?.city) && fc.status === 'completed', JSON.stringify(fc));
const turn1 = { model, tools: rtools, tool_choice: 'none', max_output_tokens: 8, input };
const plain = await client.responses.create(turn1);
const turn2 = await client.responses.create({ ...turn1,
  input: [...input, ...fc.output, { type: 'function_call_output', call_id: call?.call_id, output: '{"sky":"sunny"}' }] });
check('responses function_call_output turn', turn2.usage.input_tokens > plain.usage.input_tokens + 10 &&
      turn2.output.every((o) => o.type !== 'function_call'), `${JSON.stringify(turn2)} vs ${JSON.stringify(plain.usage)}`);
try {
  await client.responses.create({ ...rbase, previous_response_id: resp.id });
  check('responses previous_response_id refused', false, 'accepted');
} catch (e) {
  check('responses previous_response_id refused', e.status === 400 && e.param === 'previous_response_id', String(e));
}

const emb = await client.embeddings.create({ model, input: ['Once upon a time', 'Lily went'] });
const v = emb.data[0].embedding;
const norm = Math.sqrt(v.reduce((s, x) => s + x * x, 0));
check('embeddings', emb.data.length === 2 && v.length > 0 && Math.abs(norm - 1) < 1e-3, `len ${v.length} norm ${norm}`);

try {
  await client.chat.completions.create({ model, messages, max_tokens: 4, frobnicate: true });
  check('unknown field refused', false, 'accepted');
} catch (e) {
  check('unknown field refused', e.status === 400, String(e));
}
process.exit(failures > 0 ? 1 : 0);
