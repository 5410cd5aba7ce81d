"""`alphagym propose`: the trained policy answering a user's brief, scored on the train window only."""
