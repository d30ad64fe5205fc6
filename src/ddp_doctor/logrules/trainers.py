"""What the trainers themselves say before torch does: Hugging Face accelerate refusing a
launch configuration or a model placement that DDP cannot use, DeepSpeed refusing a batch
that does not divide over the GPUs, YOLOv5-family ``train.py`` refusing a DDP launch that
cannot work, and Ultralytics/YOLOv5 refusing a dataset they cannot read.

These checks run before the first collective, so when they fire they are the root cause and
the launcher's "failed (exitcode: 1)" summary that follows is only its echo. The dataset
messages are not environment faults at all; they are reported (category ``unknown``) so a
multi-GPU log that dies on its data is not blamed on NCCL or the driver.

Sources: accelerate's ``Accelerator.prepare_model``/``prepare``
(https://github.com/huggingface/accelerate/blob/main/src/accelerate/accelerator.py) and its
big-model guide (https://huggingface.co/docs/accelerate/usage_guides/big_modeling), the
bitsandbytes placement check discussed in
https://github.com/huggingface/accelerate/issues/1840 and
https://github.com/axolotl-ai-cloud/axolotl/pull/148, YOLOv5's DDP checks in ``train.py``
``main`` (https://github.com/ultralytics/yolov5/blob/master/train.py,
https://github.com/ultralytics/yolov5/pull/3275, https://github.com/ultralytics/yolov5/pull/6568)
and its multi-GPU guide (https://docs.ultralytics.com/yolov5/tutorials/multi_gpu_training/),
Ultralytics' ``check_det_dataset`` (ultralytics/data/utils.py) and the label-cache checks
of both (ultralytics/data/dataset.py, yolov5 utils/dataloaders.py), and the threads the
corpus cites: https://github.com/QwenLM/Qwen/pull/833,
https://github.com/ppogg/YOLOv5-Lite/issues/195, https://github.com/WongKinYiu/yolor/issues/58,
https://github.com/WongKinYiu/yolov9/issues/490,
https://github.com/JiayuanWang-JW/YOLOv8-multi-task/issues/54 and
https://github.com/ultralytics/yolov5/issues/8139; DeepSpeed's batch check
(deepspeed/runtime/config.py ``_batch_assertion``,
https://www.deepspeed.ai/docs/config-json/#batch-size-related-parameters,
https://github.com/OpenRLHF/OpenRLHF/issues/346,
https://github.com/deepspeedai/DeepSpeed/issues/3228) and accelerate's launch checks
(accelerate/commands/launch.py, https://github.com/huggingface/accelerate/issues/1316).
"""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.logrules.rule import Rule, rx
from ddp_doctor.model import Step

BIG_MODELS = "https://huggingface.co/docs/accelerate/usage_guides/big_modeling"
YOLOV5_DDP = "https://docs.ultralytics.com/yolov5/tutorials/multi_gpu_training/"
YOLO_DATA = "https://docs.ultralytics.com/datasets/detect/"

DEVICE_MAP_DDP = declare(
    "LOG062", Category.DDP_USAGE_ERROR,
    "accelerate: a model spread over GPUs by device_map was given to a distributed launch",
    what="The model was loaded with device_map='auto' (or another map that spreads it over "
         "several devices) and then prepared for training in a multi-process launch "
         "(accelerate launch, torchrun, DeepSpeed). A model split across GPUs inside one "
         "process cannot also be replicated once per GPU by DDP, FSDP or DeepSpeed.",
    why="accelerate refuses to prepare the model; every rank exits before training.",
    fix="For data-parallel training load the whole model on each rank's own GPU "
        "(device_map={'': local_rank}, or no device_map at all); to split a model that "
        "does not fit one GPU, run a single process (--num_processes=1) or use FSDP/"
        "DeepSpeed ZeRO-3 without a device_map.",
    docs_url=BIG_MODELS)
QUANTIZED_DEVICE = declare(
    "LOG063", Category.DDP_USAGE_ERROR,
    "accelerate: an 8-bit or 4-bit model sits on another GPU than its rank's",
    what="A bitsandbytes-quantized model (load_in_8bit/load_in_4bit, QLoRA) cannot be moved "
         "after loading, and this rank's copy was loaded on a different GPU than the one the "
         "rank trains on - usually device_map='auto' or a fixed {'': 0} under torchrun, so "
         "every rank put its copy on GPU 0. accelerate releases from before mid-2023 also "
         "raised it for any quantized model trained on several GPUs.",
    why="accelerate refuses to prepare the model on that rank.",
    fix="Load the quantized model on the rank's own GPU: device_map={'': "
        "PartialState().process_index} (or {'': int(os.environ['LOCAL_RANK'])}); upgrade "
        "an accelerate from before mid-2023.",
    docs_url="https://huggingface.co/docs/accelerate/usage_guides/quantization")
YOLO_DDP_GPUS = declare(
    "LOG064", Category.GPU_NOT_VISIBLE,
    "YOLO: more DDP processes were launched than this node has visible GPUs",
    what="YOLOv5-family train.py checks that a GPU exists for each local rank "
         "(torch.cuda.device_count() > LOCAL_RANK); a rank found none: --nproc_per_node "
         "larger than the visible GPU count, or CUDA_VISIBLE_DEVICES/--device hiding some.",
    why="That rank exits at start-up and the launcher stops the others.",
    fix="Launch one process per visible GPU (--nproc_per_node equal to the GPU count, "
        "matching --device 0,1,...).",
    docs_url=YOLOV5_DDP)
YOLO_DDP_OPTION = declare(
    "LOG065", Category.DDP_USAGE_ERROR,
    "YOLO: an option that Multi-GPU DDP training does not support",
    what="YOLOv5-family train.py refuses --image-weights and --evolve under DDP: the "
         "first reweights sampling inside one process, the second reruns training many times "
         "in one process. It decides that it "
         "runs under DDP from LOCAL_RANK, so a LOCAL_RANK left in the environment by a "
         "cluster or notebook also triggers it.",
    why="Training refuses to start.",
    fix="Drop the option for DDP runs, or run it single-GPU (python train.py --device 0); "
        "for hyperparameter evolution run one single-GPU --evolve process per GPU.",
    docs_url=YOLOV5_DDP)
DATASET_MISSING = declare(
    "LOG066", Category.UNKNOWN, "YOLO: the dataset's images are not where its YAML points",
    what="Ultralytics checked the dataset YAML before training and a train/val path it "
         "names does not exist (a relative path resolved against another directory, a "
         "dataset not downloaded, a typo). A data problem, not a GPU or DDP one.",
    why="Training stops before the model is built.",
    fix="Fix the 'path', 'train' and 'val' entries of the dataset YAML (absolute paths are "
        "safest), or download the dataset to the directory the message names.",
    docs_url=YOLO_DATA)
NO_LABELS = declare(
    "LOG067", Category.UNKNOWN, "YOLO: no labels were found for the training images",
    what="The dataset scan matched no label file to any image: labels/ is not beside "
         "images/ with the same names, the label files are empty or in another format, or "
         "a stale *.cache from an earlier layout was reused. A data problem, not a GPU or "
         "DDP one.",
    why="YOLO refuses to train without labels.",
    fix="Put one .txt label per image under a labels/ folder parallel to images/, then "
        "delete the *.cache files next to the images and rerun.",
    docs_url=YOLO_DATA)

DEEPSPEED_BATCH = declare(
    "LOG068", Category.DDP_USAGE_ERROR,
    "DeepSpeed: the global batch is not micro-batch x accumulation x GPUs",
    what="DeepSpeed requires train_batch_size == train_micro_batch_size_per_gpu x "
         "gradient_accumulation_steps x world_size. A config written for another GPU count "
         "(a fixed train_batch_size, a GPU dropped from the node) breaks it; so does a world "
         "size of 1 on a multi-GPU launch, when the script was not started by a distributed "
         "launcher or DeepSpeed read the world size before the process group existed.",
    why="DeepSpeed refuses to initialise; every rank exits.",
    fix="Set train_batch_size and the micro-batch to \"auto\" in the DeepSpeed config (the "
        "Hugging Face Trainer fills them in), or make the global batch divisible by the GPU "
        "count; launch with deepspeed/torchrun/accelerate so the world size is right.",
    docs_url="https://www.deepspeed.ai/docs/config-json/#batch-size-related-parameters")
ACCELERATE_GPU_IDS = declare(
    "LOG069", Category.DDP_USAGE_ERROR,
    "accelerate: a multi-GPU launch was configured with fewer than two GPUs",
    what="The accelerate config or command asks for a multi-GPU launch (distributed_type: "
         "MULTI_GPU, --multi_gpu) but lists a single GPU in gpu_ids on one machine; the "
         "config was written for another machine or a single-GPU run was started with a "
         "multi-GPU config.",
    why="accelerate launch refuses to start.",
    fix="For one GPU use a config with distributed_type: NO (or `accelerate launch "
        "--num_processes 1`); for several, list them all in gpu_ids (or 'all') and set "
        "num_processes to their count.",
    docs_url="https://huggingface.co/docs/accelerate/basic_tutorials/launch")

RULES: tuple[Rule, ...] = (
    Rule(DEVICE_MAP_DDP,
         rx(r"error: you can't train a model that has been loaded with `?device_map="
            r"'auto'`? in any distributed mode"),
         ("error",),
         (Step("Check whether the script loads the model with a device_map.",
               command="grep -rn device_map --include=*.py ."),
          Step("For DDP, load each rank's whole copy on its own GPU: in the script pass "
               "device_map={'': PartialState().process_index} (from accelerate import "
               "PartialState), or drop device_map."),
          Step("To shard a model too large for one GPU instead, run a single process.",
               command="accelerate launch --num_processes 1 train.py")),
         examples=(
             "ValueError: You can't train a model that has been loaded with "
             "`device_map='auto'` in any distributed mode. Please rerun your script "
             "specifying `--num_processes=1` or by launching with `python {{myscript.py}}`.",)),
    Rule(QUANTIZED_DEVICE,
         rx(r"error: you can't train a model that has been loaded in (?:8-bit|4-bit|8-bit or "
            r"4-bit) precision on (?:a different device than the one you're training on"
            r"|multiple devices)"),
         ("error",),
         (Step("Check where the script places the quantized model.",
               command="grep -rn -e device_map -e load_in_ --include=*.py ."),
          Step("Load it on the rank's own GPU: device_map={'': PartialState().process_index} "
               "(from accelerate import PartialState)."),
          Step("Check the accelerate version (releases from before mid-2023 refuse any "
               "multi-GPU quantized model).", command="python -m pip show accelerate "
                                                     "bitsandbytes")),
         examples=(
             "ValueError: You can't train a model that has been loaded in 8-bit precision on "
             "a different device than the one you're training on. Make sure you loaded the "
             "model on the correct device using for example "
             "`device_map={'':torch.cuda.current_device()}`",
             "ValueError: You can't train a model that has been loaded in 8-bit or 4-bit "
             "precision on a different device than the one you're training on.",
             "ValueError: You can't train a model that has been loaded in 8-bit precision on "
             "multiple devices.")),
    # The assertion's own message, and (older YOLOv5 and its forks, whose assert had no
    # message) the traceback's source line, which names the same check.
    Rule(YOLO_DDP_GPUS,
         rx(r"error: insufficient cuda devices for ddp command",
            r"assert torch\.cuda\.device_count\(\) > (?:opt\.)?local_rank\b"),
         ("error", "cud"),
         (Step("Count the GPUs this process can see.",
               command='nvidia-smi -L; echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; '
                       'python -c "import torch; print(torch.cuda.device_count())"'),
          Step("Launch one process per visible GPU (e.g. 2 GPUs).",
               command="python -m torch.distributed.run --nproc_per_node 2 train.py "
                       "--device 0,1")),
         examples=("AssertionError: insufficient CUDA devices for DDP command",
                   "    assert torch.cuda.device_count() > opt.local_rank",
                   "        assert torch.cuda.device_count() > LOCAL_RANK, 'insufficient CUDA "
                   "devices for DDP command'")),
    Rule(YOLO_DDP_OPTION,
         rx(r"error: --(?:image-weights|evolve) is not compatible with \w+ multi-gpu ddp",
            r"error: ddp mode not implemented for --(?:evolve|image-weights)"),
         ("error",),
         (Step("See whether a LOCAL_RANK left in the environment makes a single-GPU run look "
               "like DDP.", command="env | grep -E 'LOCAL_RANK|WORLD_SIZE'"),
          Step("Run --evolve on one GPU without the DDP launcher.",
               command="python train.py --data data.yaml --weights yolov5s.pt --device 0 "
                       "--evolve"),
          Step("To evolve on several GPUs, run one single-GPU --evolve process per GPU.",
               command="for i in 0 1; do nohup python train.py --data data.yaml --weights "
                       "yolov5s.pt --device $i --evolve > evolve_gpu_$i.log & done")),
         examples=(
             "AssertionError: --image-weights is not compatible with YOLOv5 Multi-GPU DDP "
             "training",
             "AssertionError: --evolve is not compatible with YOLOv5 Multi-GPU DDP training",
             "AssertionError: DDP mode not implemented for --evolve")),
    Rule(DATASET_MISSING,
         # Ultralytics' own wording ("Dataset '...' error", then the missing paths; on
         # Windows its emoji are stripped), not any library's "dataset not found".
         rx(r"error: \s*dataset '[^']*' error\b",
            r"error: [^\n]*dataset '[^']*' (?:images )?not found[^\n]*missing path"),
         ("error",),
         (Step("Show the dataset YAML and check that its paths exist (replace data.yaml).",
               command="cat data.yaml; yolo settings"),),
         examples=(
             "RuntimeError: Dataset 'ultralytics/datasets/bdd-multi.yaml' error ❌ ",
             "FileNotFoundError: Dataset '/home/elin/model_training/yolov8/ClassAction-1/"
             "data.yaml' not found ⚠️, missing paths ['/home/elin/model_training/yolov8/"
             "datasets/ClassAction-1/valid/images']")),
    Rule(NO_LABELS,
         rx(r"error: [^\n]*no labels (?:found )?in [^\n]*(?:can ?not start training"
            r"|can ?not train without labels)"),
         ("error",),
         (Step("Check that each image has a label file in the parallel labels/ folder "
               "(replace the dataset path).",
               command="ls datasets/mydata/images/train | head; "
                       "ls datasets/mydata/labels/train | head"),
          Step("Delete the stale label caches before rerunning.",
               command="find datasets -name '*.cache' -delete")),
         examples=(
             "AssertionError: train: No labels found in /content/drive/MyDrive/Complete/Train/"
             "Images.cache, can not start training. See https://docs.ultralytics.com/yolov5/"
             "tutorials/train_custom_data",
             "AssertionError: train: No labels in data\\train.cache. Can not train without "
             "labels. See https://github.com/ultralytics/yolov5/wiki/Train-Custom-Data",
             "FileNotFoundError: val: No labels found in C:\\[...]\\lisa-dataset\\valid\\"
             "labels.cache, can not start training")),
    Rule(DEEPSPEED_BATCH,
         rx(r"error: check batch related parameters\. train_batch_size is not"),
         ("error",),
         (Step("Show the batch settings in the DeepSpeed config (replace ds_config.json).",
               command="grep -n -e batch -e gradient_accumulation ds_config.json"),
          Step("Count the GPUs the launch uses; the global batch must divide by it.",
               command="nvidia-smi -L | wc -l"),
          Step("Or let the Trainer derive the batch: set \"train_batch_size\": \"auto\" and "
               "\"train_micro_batch_size_per_gpu\": \"auto\" in the DeepSpeed config.")),
         examples=(
             "AssertionError: Check batch related parameters. train_batch_size is not equal "
             "to micro_batch_per_gpu * gradient_acc_step * world_size 256 != 2 * 18 * 7",
             "AssertionError: Check batch related parameters. train_batch_size is not"),
         alternatives=("package_conflict: a world size of 1 on a multi-GPU launch with ZeRO-3 "
                       "can be a DeepSpeed/transformers version mismatch reading the world "
                       "size before the process group exists",),
         decide=(Step("Is the world size in the message the number of GPUs launched?",
                      command="nvidia-smi -L | wc -l; python -m pip show deepspeed "
                              "transformers accelerate"),)),
    Rule(ACCELERATE_GPU_IDS,
         rx(r"error: less than two gpu ids were configured and tried to run on (?:on )?"
            r"multiple gpus"),
         ("error",),
         (Step("Show the accelerate configuration in use.", command="accelerate env"),
          Step("Start a single-GPU run without the multi-GPU config.",
               command="accelerate launch --num_processes 1 --gpu_ids 0 train.py"),
          Step("Or rewrite the config for this machine's GPUs.", command="accelerate config")),
         examples=(
             "ValueError: Less than two GPU ids were configured and tried to run on on "
             "multiple GPUs. Please ensure at least two are specified for `--gpu_ids`, or use "
             "`--gpu_ids='all'`.",)),
)
