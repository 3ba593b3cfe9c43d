module github.com/airlockrun/airlock

go 1.26.8

require (
	github.com/alecthomas/kong v1.17.0
	github.com/pmezard/go-difflib v1.0.0
	github.com/rogpeppe/go-internal v1.16.0
	golang.org/x/sys v0.50.0
)

require (
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/tools v0.51.0 // indirect
)
