// A two-turn agent loop against a herd gateway whose chat template has a tool-call
// syntax (Hermes / Qwen2.5 here), with the official OpenAI Node client and the Vercel
// AI SDK. The test model is tiny, so its calls are forced with tool_choice "required" or
// a named function (a grammar in the template's call syntax); the checks are on what
// the APIs return: tool_calls with parseable arguments that fit the schema,
// finish_reason "tool_calls", streamed == non-streamed, the tool result accepted in
// the next turn and a plain answer after it.
// Prints "PASS name" / "FAIL name: why" per check; exits 1 on any failure.
// Usage: node agent.mjs BASE_URL MODEL
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { generateObject, generateText, streamText, tool } from 'ai';
import { createOpenAI } from '@ai-sdk/openai';
import { z } from 'zod';

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 120000 });
let failures = 0;
function check(name, ok, why = '') {
  console.log(ok ? `PASS ${name}` : `FAIL ${name}: ${why}`);
  if (!ok) failures++;
}

const cities = ['Paris', 'London', 'Tokyo'];
const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The current weather of a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', enum: cities },
          unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
        },
        required: ['city', 'unit'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'add',
      description: 'Adds two small numbers',
      parameters: {
        type: 'object',
        properties: { a: { type: 'integer', enum: [1, 2, 3] }, b: { type: 'integer', enum: [1, 2, 3] } },
        required: ['a', 'b'],
      },
    },
  },
];
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
const base = { model, messages, tools, temperature: 0, max_tokens: 400, parallel_tool_calls: false };

function validCall(c, name) {
  if (c?.type !== 'function' || typeof c.id !== 'string' || c.id.length === 0) return false;
  if (name && c.function.name !== name) return false;
  let args;
  try {
    args = JSON.parse(c.function.arguments);
  } catch {
    return false;
  }
  if (c.function.name === 'get_weather') return cities.includes(args.city) && ['celsius', 'fahrenheit'].includes(args.unit);
  if (c.function.name === 'add') return [1, 2, 3].includes(args.a) && [1, 2, 3].includes(args.b);
  return false;
}

// Turn 1, not streamed: a forced call.
const r1 = await client.chat.completions.create({ ...base, tool_choice: 'required' });
const m1 = r1.choices[0].message;
check('required: one tool call', m1.tool_calls?.length === 1 && validCall(m1.tool_calls[0]), JSON.stringify(r1.choices[0]));
check('required: finish_reason tool_calls, content null', r1.choices[0].finish_reason === 'tool_calls' && m1.content === null,
      JSON.stringify(r1.choices[0]));

// The same, streamed: the calls assembled from delta.tool_calls equal the whole ones.
const s1 = await client.chat.completions.create({ ...base, tool_choice: 'required', stream: true });
const acc = [];
let sfinish = null;
let scontent = '';
for await (const chunk of s1) {
  for (const ch of chunk.choices) {
    scontent += ch.delta?.content ?? '';
    for (const d of ch.delta?.tool_calls ?? []) {
      acc[d.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
      if (d.id) acc[d.index].id = d.id;
      if (d.function?.name) acc[d.index].function.name += d.function.name;
      if (d.function?.arguments) acc[d.index].function.arguments += d.function.arguments;
    }
    if (ch.finish_reason) sfinish = ch.finish_reason;
  }
}
const strip = (calls) => JSON.stringify((calls ?? []).map((c) => [c.function.name, c.function.arguments]));
check('required: streamed calls equal non-streamed', strip(acc) === strip(m1.tool_calls) && scontent === '',
      `${strip(acc)} ${JSON.stringify(scontent)} vs ${strip(m1.tool_calls)}`);
check('required: streamed finish_reason', sfinish === 'tool_calls', String(sfinish));

// A named function.
const rn = await client.chat.completions.create({
  ...base, tool_choice: { type: 'function', function: { name: 'add' } },
});
check('named: a call of add', rn.choices[0].message.tool_calls?.length === 1 &&
      validCall(rn.choices[0].message.tool_calls[0], 'add'), JSON.stringify(rn.choices[0]));

// Turn 2: the tool's result goes back; the model answers in text.
const call = m1.tool_calls[0];
const turn2 = [
  ...messages,
  { role: 'assistant', content: null, tool_calls: [call] },
  { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temperature: 21, sky: 'clear' }) },
];
const r2 = await client.chat.completions.create({ model, messages: turn2, tools, temperature: 0, max_tokens: 24 });
check('turn 2: an answer in content', typeof r2.choices[0].message.content === 'string' &&
      r2.choices[0].message.content.length > 0 && !r2.choices[0].message.tool_calls, JSON.stringify(r2.choices[0]));
const s2 = await client.chat.completions.create({ model, messages: turn2, tools, temperature: 0, max_tokens: 24, stream: true });
let text2 = '';
for await (const chunk of s2) for (const ch of chunk.choices) text2 += ch.delta?.content ?? '';
check('turn 2: streamed equals non-streamed', text2 === r2.choices[0].message.content,
      `${JSON.stringify(text2)} vs ${JSON.stringify(r2.choices[0].message.content)}`);

// Bad tool_choice: 400 naming the field.
try {
  await client.chat.completions.create({ ...base, tool_choice: { type: 'function', function: { name: 'nope' } } });
  check('unknown named function refused', false, 'accepted');
} catch (e) {
  check('unknown named function refused', e.status === 400 && /tool_choice/.test(e.message), `${e.status} ${e.message}`);
}

// The Vercel AI SDK: a forced call executed by the SDK, then the answer.
const provider = createOpenAI({ baseURL, apiKey: 'unused', compatibility: 'compatible' });
const weather = tool({
  description: 'The current weather of a city',
  parameters: z.object({ city: z.enum(['Paris', 'London', 'Tokyo']), unit: z.enum(['celsius', 'fahrenheit']) }),
  execute: async ({ city, unit }) => ({ city, unit, temperature: 21 }),
});
const aiMessages = [{ role: 'user', content: 'What is the weather in Paris?' }];
const g1 = await generateText({
  model: provider.chat(model, { parallelToolCalls: false }), tools: { get_weather: weather }, toolChoice: 'required',
  messages: aiMessages, temperature: 0, maxTokens: 400, maxRetries: 0,
});
check('ai-sdk: required call executed', g1.toolCalls.length === 1 && g1.toolCalls[0].toolName === 'get_weather' &&
      g1.toolResults.length === 1 && g1.finishReason === 'tool-calls', JSON.stringify({ calls: g1.toolCalls, f: g1.finishReason }));
const st = streamText({
  model: provider.chat(model, { parallelToolCalls: false }), tools: { get_weather: weather }, toolChoice: 'required',
  messages: aiMessages, temperature: 0, maxTokens: 400, maxRetries: 0,
  onError: ({ error }) => check('ai-sdk: stream without error', false, String(error)),
});
await st.consumeStream();  // the SDK's result promises settle once the stream is read
const stCalls = await st.toolCalls;
check('ai-sdk: streamed call equals generated', JSON.stringify(stCalls.map((c) => c.args)) ===
      JSON.stringify(g1.toolCalls.map((c) => c.args)), `${JSON.stringify(stCalls)} vs ${JSON.stringify(g1.toolCalls)}`);
const g2 = await generateText({
  model: provider.chat(model), tools: { get_weather: weather }, toolChoice: 'none',
  messages: [...aiMessages, ...g1.response.messages], temperature: 0, maxTokens: 24, maxRetries: 0,
});
check('ai-sdk: turn 2 answer', g2.text.length > 0 && g2.toolCalls.length === 0, JSON.stringify(g2.text));

// Structured output from zod schemas (integers with bounds, enums, arrays, nullable,
// nested objects; strings bounded so the tiny model finishes), three ways: the openai
// client's parse helper (response_format json_schema), the AI SDK's generateObject with
// structured outputs, and generateObject in tool mode (a forced named tool call).
const Pet = z.object({
  name: z.string().max(8),
  age: z.number().int().min(0).max(30),
  kind: z.enum(['cat', 'dog', 'bird']),
  tags: z.array(z.enum(['small', 'big', 'loud'])).max(3),
  owner: z.object({ name: z.string().max(6), years: z.number().int().positive().max(99) }),
  nick: z.string().max(5).nullable(),
  weight: z.number().min(0).max(50).nullable(),
});
const petMessages = [{ role: 'user', content: 'Describe a pet as JSON.' }];
const parsed = await client.beta.chat.completions.parse({
  model, messages: petMessages, temperature: 0, max_tokens: 600, response_format: zodResponseFormat(Pet, 'pet'),
});
check('zod: chat.completions.parse', Pet.safeParse(parsed.choices[0].message.parsed).success,
      JSON.stringify(parsed.choices[0].message));
for (const [name, opts] of [['generateObject', { structuredOutputs: true }], ['generateObject tool mode', {}]]) {
  try {
    const g = await generateObject({
      model: provider.chat(model, opts), schema: Pet, messages: petMessages, temperature: 0, maxTokens: 600,
      maxRetries: 0, ...(name.endsWith('tool mode') ? { mode: 'tool' } : {}),
    });
    check(`zod: ai-sdk ${name}`, Pet.safeParse(g.object).success, JSON.stringify(g.object));
  } catch (e) {
    check(`zod: ai-sdk ${name}`, false, `${e.message} ${e.text ?? ''}`);
  }
}

process.exit(failures === 0 ? 0 : 1);
