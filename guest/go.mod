module beachball/guest

go 1.19
