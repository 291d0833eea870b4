module vsockdiag/clients/go

go 1.19
