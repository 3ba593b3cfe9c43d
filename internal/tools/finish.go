package tools

import (
	"context"
	"errors"
	"strings"
)

type finishArgs struct {
	Summary string `json:"summary"`
}

// Finish returns the finish host tool: the model's claim that the task is
// done, with a summary. It records the claim in Details (Finished, Summary);
// the agent loop stops on it and runs the completion checks, which do not
// trust the claim. It changes nothing: the claim is only recorded.
func Finish() Tool {
	return &spec[finishArgs]{
		name:    "finish",
		place:   PlaceHost,
		effects: readOnly,
		desc:    "Declare the task complete and summarise what was done. The run's checks verify the work independently afterwards.",
		params: []param{
			{Name: "summary", Type: typeString, Required: true, Desc: "What was done and why it solves the task."},
		},
		validate: func(a *finishArgs) error {
			if strings.TrimSpace(a.Summary) == "" {
				return errors.New("summary is empty")
			}
			return nil
		},
		run: func(_ context.Context, _ Env, a finishArgs) (Result, error) {
			return Result{Content: "Completion recorded; the run's checks verify it next.", Details: Details{Finished: true, Summary: a.Summary}}, nil
		},
	}
}
