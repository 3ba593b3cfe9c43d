package model_test

import (
	"context"
	"fmt"

	"github.com/airlockrun/airlock/internal/model"
)

// Example shows the loop's side of the contract with the scripted provider:
// send the conversation, record the turn, answer every tool call, repeat.
func Example() {
	p, err := model.New("script:testdata/script/fix_calc.yaml", model.Options{})
	if err != nil {
		panic(err)
	}
	req := model.Request{
		System:   "You fix bugs.",
		Messages: []model.Message{{Role: model.RoleUser, Content: []model.Part{model.TextPart("Make the tests pass.")}}},
	}
	for {
		resp, err := p.Complete(context.Background(), req, nil)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		req.Messages = append(req.Messages, resp.Message())
		results := model.Message{Role: model.RoleTool}
		for _, c := range resp.ToolCalls {
			fmt.Printf("%s %s %s\n", c.ID, c.Name, c.Args)
			results.Content = append(results.Content, model.ToolResultPart(model.ToolResult{CallID: c.ID, Content: "ok"}))
		}
		if resp.StopReason != model.StopToolUse || resp.ToolCalls[0].Name == "finish" {
			return
		}
		req.Messages = append(req.Messages, results)
	}
	// Output:
	// call_1_0 run_command {"command":"go test ./..."}
	// call_2_0 edit_file {"path":"calc.go","old":"a - b","new":"a + b"}
	// call_3_0 finish {"summary":"Fixed the sign error in Add."}
}
