// Conversations of four rounds through the Vercel AI SDK (generateText, its OpenAI-compatible provider) to the
// embedded llama-server, with the SDK's telemetry on; the OpenTelemetry JS SDK's own span records
// (ConsoleSpanExporter's _exportInfo: traceId, parentSpanContext, id, timestamp in microseconds, attributes) saved
// as one JSON list per file, as a harness saves them. Run by generate.py beside it: node generate.mjs BASE_URL DIR
//   ai_sdk_spans.json     round 3 puts a new time in the system prompt: a real cache break
//   ai_sdk_no_break.json  the same conversation with the time kept: every round extends the one before
//   ai_sdk_no_inputs.json telemetry with recordInputs: false: the spans hold no prompt
import { writeFileSync } from "node:fs";
import { context } from "@opentelemetry/api";
import { AsyncLocalStorageContextManager } from "@opentelemetry/context-async-hooks";
import { BasicTracerProvider, ConsoleSpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { generateText, tool } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { z } from "zod";

const [baseURL, dir] = process.argv.slice(2);
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());  // as NodeSDK sets it: spans nest
const llama = createOpenAICompatible({ name: "llama", baseURL: `${baseURL}/v1`, includeUsage: true });
const system = (time) => `You are a terse assistant for a weather desk. Answer in one word. The time is ${time}.`;
const tools = { get_weather: tool({ description: "The weather in a city", inputSchema: z.object({ city: z.string() }),
                                    execute: async ({ city }) => `Sunny in ${city}` }) };
const questions = ["Sky colour?", "Grass colour?", "Snow colour?"];

async function conversation(file, newTimeOnRound, telemetry) {
  const spans = [];
  const console_ = new ConsoleSpanExporter();
  const collect = { export(batch, done) { spans.push(...batch.map((s) => console_._exportInfo(s))); done({ code: 0 }); },
                    shutdown() { return Promise.resolve(); } };
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(collect)] });
  const tracer = provider.getTracer("ai");
  const messages = [{ role: "user", content: "Hi?" }];
  for (let round = 1; round <= 4; round++) {
    const time = newTimeOnRound !== null && round >= newTimeOnRound ? "18:05" : "18:00";
    const result = await generateText({ model: llama.chatModel("smollm2"), system: system(time), messages, tools,
                                        maxOutputTokens: 4, temperature: 0,
                                        experimental_telemetry: { isEnabled: true, tracer, functionId: "weather-desk",
                                                                  ...telemetry } });
    if (round <= questions.length) {
      messages.push({ role: "assistant", content: result.text }, { role: "user", content: questions[round - 1] });
    }
  }
  await provider.forceFlush();
  writeFileSync(`${dir}/${file}`, JSON.stringify(spans));
}

await conversation("ai_sdk_spans.json", 3, {});
await conversation("ai_sdk_no_break.json", null, {});
await conversation("ai_sdk_no_inputs.json", null, { recordInputs: false });
