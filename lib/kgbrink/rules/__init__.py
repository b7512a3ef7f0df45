"""Horn rules with AMIE3's semantics (BRINK Sec. 3.1): the rule model, mining plans, supports and selection
on Spark, groundings, and the rules table."""
