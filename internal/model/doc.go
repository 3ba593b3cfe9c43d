// Package model talks to language models on the host's behalf: one small
// Provider interface, provider-neutral Request and Response types, and thin
// net/http adapters for the Anthropic Messages API, OpenAI Chat Completions,
// the OpenAI Responses API and any OpenAI-compatible server, plus a scripted
// provider that replays a YAML file for tests and the demo. New builds one
// from a "PROVIDER:MODEL" spec. Fit shrinks a conversation to a token budget.
// The server-sent event parser is the leaf package internal/sse.
//
// Invariants:
//   - A Response marshals to JSON and back to an equal value, so the run
//     engine can record a model turn and replay it after a crash instead of
//     asking again. Tool-call arguments are kept in canonical JSON for this.
//   - The API key is given by the caller (Options.Key, from the secret store
//     or the environment, never from a sandbox), is sent only in the
//     provider's auth header, and never appears in an error or a log line:
//     provider error text is scrubbed of it.
//   - Providers hold no per-call state: each is safe for concurrent use.
//   - Redirects are never followed, so a key cannot be carried to a host the
//     caller did not name.
//   - Every input from a provider is bounded (body size, event size, tool
//     calls, content blocks) and a malformed one is an error, never a panic.
//   - Retries are bounded in attempts and in total time, follow exponential
//     backoff with full jitter, honour Retry-After, never repeat a request a
//     4xx other than 408/409/429 refused, and stop when the context is done.
//
// Only the run engine, the LLM gateway and host wiring import this package;
// the sandbox side must never link it.
package model
