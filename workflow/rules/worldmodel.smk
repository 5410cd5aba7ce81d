# World-model area: JEPA world model trained on the train panel only, stress worlds and the gate report.

WM_IN, WM_OUT, WM_CMD = stage_rule("world_model")


rule world_model:
    input:
        **WM_IN,
    output:
        model=WM_OUT["model"],
        worlds=directory(WM_OUT["worlds"]),
        gates=WM_OUT["gates"],
    log:
        "results/logs/world_model.log",
    shell:
        WM_CMD + " > {log} 2>&1"
