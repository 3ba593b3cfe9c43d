package model

import (
	"fmt"
	"strings"
)

// New builds the provider a spec names, "PROVIDER:MODEL":
//
//	anthropic:MODEL          Anthropic Messages API (o.Key required)
//	openai:MODEL             OpenAI Chat Completions (o.Key required)
//	openai-responses:MODEL   OpenAI Responses API (o.Key required)
//	openai-compatible:MODEL  Chat Completions at o.BaseURL (vLLM, Ollama,
//	                         llama.cpp server); o.Key optional
//	script:PATH              the scripted provider, replaying PATH
//
// Only the first colon splits, so a model may hold colons
// ("openai-compatible:llama3.1:8b"), and so may a path.
func New(spec string, o Options) (Provider, error) {
	kind, arg, ok := strings.Cut(spec, ":")
	if !ok || arg == "" {
		return nil, fmt.Errorf("model: spec %q is not PROVIDER:MODEL (anthropic, openai, openai-responses, openai-compatible, script)", spec)
	}
	switch kind {
	case "anthropic":
		return NewAnthropic(arg, o)
	case "openai":
		return NewOpenAIChat(arg, o)
	case "openai-responses":
		return NewOpenAIResponses(arg, o)
	case "openai-compatible":
		return NewCompatibleChat(arg, o)
	case "script":
		return LoadScript(arg)
	}
	return nil, fmt.Errorf("model: unknown provider %q in spec %q (want anthropic, openai, openai-responses, openai-compatible or script)", kind, spec)
}
