module sipsec/crossbench

go 1.19
