"""Pure: risk + policy + history -> actions (mix, boosts, warm pools), each with its reason."""
