package main

// devCommands are the devtool's commands that run the checks and rehearsals of `make test` and
// `make fresh-machine` that are more than one go command (dev_*.go).
func devCommands() []command {
	return []command{
		fuzzCommand(),
		imagesCommand(),
		testReportCommand(),
		gofmtCheckCommand(),
		freshMachineCommand(),
		buildSharingCommand(),
	}
}
