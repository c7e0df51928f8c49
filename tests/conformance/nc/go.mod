module nodeagent.test/nc

go 1.26.0
