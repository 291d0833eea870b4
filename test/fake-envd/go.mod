module vsockdiag/fake-envd

go 1.19
