// Drives a herd gateway with the official OpenAI Node client (npm `openai`): models,
// completions, chat completions (streaming and not) and embeddings. Prints one
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
