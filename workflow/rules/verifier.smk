# Verifier area: the novelty archive, seeded with the Alpha101 books on the train panel.

ARCHIVE_IN, ARCHIVE_OUT, ARCHIVE_CMD = stage_rule("archive")


rule archive:
    input:
        **ARCHIVE_IN,
    output:
        **ARCHIVE_OUT,
    log:
        "results/logs/archive.log",
    shell:
        ARCHIVE_CMD + " > {log} 2>&1"
