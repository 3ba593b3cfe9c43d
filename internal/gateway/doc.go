// Package gateway is the LLM gateway: OpenAI- and Anthropic-compatible
// endpoints a sandbox calls with its run's scoped token instead of a
// provider key. The egress proxy serves it to the sandbox (egress.Config.Local)
// at http://127.0.0.1:3128/llm/UPSTREAM/..., so an official SDK works by base
// URL alone:
//
//	OPENAI_BASE_URL=http://127.0.0.1:3128/llm/openai/v1
//	ANTHROPIC_BASE_URL=http://127.0.0.1:3128/llm/anthropic
//
// Endpoints: for an upstream of KindOpenAI (OpenAI or any compatible
// server) POST v1/chat/completions, v1/responses and v1/embeddings, GET
// v1/models; for KindAnthropic POST v1/messages and v1/messages/count_tokens,
// GET v1/models. Streams pass through event by event, flushed as each
// arrives.
//
// Every call, in order: the sandbox's identity comes from the proxy (the
// socket), never from the request; the token (Authorization: Bearer, or
// x-api-key) must be valid for that tenant, run and sandbox and purpose
// "llm"; the run's policy must enable the gateway; the model, after the
// policy's map, must be on its allowlist; the run's rate limit, token and
// credit budgets and, for a metered tenant, its credit balance must allow
// the call, whose output bound is lowered to what they leave. Only then is
// the request sent upstream, with the sandbox's auth headers gone and the
// host's key added (after, so nothing the sandbox sends can replace it).
// Usage comes from the provider's answer only, is priced by the host's
// table, recorded (Config.Record) and debited to the tenant's ledger,
// linked to the recorded event; metering, pricing and debits follow
// package credit's rule (a debit that fails is owed and made later). A
// stream that runs a budget out is ended with an error event its SDK
// raises.
//
// Invariants:
//   - Nothing is sent upstream before the token, policy, rate and budget
//     checks pass; a refused call reaches no upstream.
//   - A provider key goes only into the upstream request's auth header.
//     It never reaches the sandbox (echoes are scrubbed from answers),
//     an event, a log line or an error; neither does the sandbox's token
//     reach an upstream.
//   - The gateway's own errors are in the provider's error shape, with
//     fixed messages: no key, token, model name, URL or path in them.
//   - The sum of a tenant's gateway debits is the priced sum of the usage
//     the upstreams reported (or, for a stream cut before it reported,
//     the gateway's estimate, marked as such in the event).
//
// Only host wiring imports this package.
package gateway
