"""Stage 07 (questions): yes/no question axes, their classifier and their report."""
