# Data area: simulate or fetch raw prices, then build the adjusted, validated train and holdout panels.

DOWNLOAD_IN, DOWNLOAD_OUT, DOWNLOAD_CMD = stage_rule("download")
PANEL_IN, PANEL_OUT, PANEL_CMD = stage_rule("panel")


rule download:
    input:
        **DOWNLOAD_IN,
    output:
        **DOWNLOAD_OUT,
    log:
        "results/logs/download.log",
    shell:
        DOWNLOAD_CMD + " > {log} 2>&1"


rule panel:
    input:
        **PANEL_IN,
    output:
        **PANEL_OUT,
    log:
        "results/logs/panel.log",
    shell:
        PANEL_CMD + " > {log} 2>&1"
