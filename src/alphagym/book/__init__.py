"""alphagym.book"""
