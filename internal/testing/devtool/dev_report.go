package main

import (
	"context"
	"os"

	"github.com/galleon-mesh/galleon/internal/testing/testreport"
)

func testReportCommand() command {
	return command{
		name:  "test-report",
		usage: "DIR [go test args]  go test -v in the module DIR, printing the per-release sub-tests and the package lines (the whole log on a failure)",
		run:   runTestReport,
	}
}

func runTestReport(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError{msg: "usage: test-report DIR [go test args...], e.g. test-report test -count=1 ./...", exit: 2}
	}
	return testreport.Run(ctx, devEnv("GO", "go"), args[0], args[1:], os.Stdout)
}
