module github.com/airlockrun/airlock

go 1.26.8

require (
	github.com/alecthomas/kong v1.17.0 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
