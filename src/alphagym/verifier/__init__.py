"""alphagym.verifier"""
