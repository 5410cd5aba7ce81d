"""alphagym.dsl"""
