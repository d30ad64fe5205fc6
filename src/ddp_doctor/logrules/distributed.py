"""torch.distributed outside NCCL: the rendezvous (the TCPStore on MASTER_ADDR:MASTER_PORT
that lets ranks find each other) and the ways a training script misuses DDP.

The store's client retries while rank 0 is still starting, so "failed to connect ...
Connection refused" warnings also appear in healthy runs: they are a warning here, and the
error is the client's final timeout. A rendezvous timeout is also what the waiting ranks say
when another rank died first, hence ``symptom_of="*"``.

Sources: torchrun (https://pytorch.org/docs/stable/elastic/run.html), the c10d TCPStore
socket code (torch/csrc/distributed/c10d/socket.cpp, TCPStore.cpp), elastic rendezvous
errors (torch/distributed/elastic/rendezvous/api.py), init_process_group's env://
rendezvous (torch/distributed/rendezvous.py), DDP's reducer messages
(torch/csrc/distributed/c10d/reducer.cpp, https://pytorch.org/docs/stable/notes/ddp.html),
SyncBatchNorm (torch/nn/modules/batchnorm.py), CUDA with multiprocessing
(https://pytorch.org/docs/stable/notes/multiprocessing.html#cuda-in-multiprocessing),
NCCL's duplicate-GPU check (NVIDIA/nccl src/init.cc) and YOLO's batch checks
(ultralytics/yolov5 utils/torch_utils.py ``select_device``, ultralytics/ultralytics
ultralytics/utils/torch_utils.py and engine/trainer.py).
"""

from __future__ import annotations

import re

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.logrules.rule import ANY_ERROR, Explains, ReadAs, Rule, rx
from ddp_doctor.model import Severity, Step

RUN_DOCS = "https://pytorch.org/docs/stable/elastic/run.html"
DDP_NOTES = "https://pytorch.org/docs/stable/notes/ddp.html"
REACH = Step("From a worker node, test that the master's address and port answer.",
             command="nc -zv $MASTER_ADDR $MASTER_PORT")

PORT_IN_USE = declare(
    "LOG001", Category.RENDEZVOUS_PORT_IN_USE, "Address already in use (rendezvous port taken)",
    what="Rank 0 could not listen on MASTER_PORT: another process (often an earlier training "
         "that is still running) holds it.",
    why="No rank can join, so the job dies before training.",
    fix="Use another --master_port (or MASTER_PORT), or stop the process holding it "
        "(`ss -ltnp 'sport = :PORT'`).",
    docs_url=RUN_DOCS)
RDZV_TIMEOUT = declare(
    "LOG052", Category.RENDEZVOUS_FAILURE, "The ranks could not meet (rendezvous timed out)",
    what="A rank waited for the rendezvous store on MASTER_ADDR:MASTER_PORT, or for the other "
         "ranks to join it, and gave up: a wrong or unreachable MASTER_ADDR, a firewall, a "
         "node that never started, or a world size larger than the ranks launched.",
    why="Training never starts.",
    fix="Check MASTER_ADDR/PORT on every node, open the port in the firewall, and make "
        "nnodes x nproc_per_node match the ranks you start.",
    docs_url=RUN_DOCS)
RDZV_REFUSED = declare(
    "LOG053", Category.RENDEZVOUS_FAILURE, "Connection refused by the rendezvous address",
    what="Nothing listened at MASTER_ADDR:MASTER_PORT when a rank connected: rank 0 not "
         "started or already dead, a wrong address or port, or a hostname resolving to "
         "127.0.1.1 on another node.",
    why="The rank cannot join and the job fails at init_process_group.",
    fix="Start rank 0 first and give every node the address other nodes can reach (an IP, "
        "not localhost).",
    docs_url=RUN_DOCS)
RDZV_RETRY = declare(
    "LOG054", Category.RENDEZVOUS_FAILURE, "A rank is still trying to reach the rendezvous store",
    what="The store's client could not connect yet and retries; harmless if rank 0 was just "
         "slower to start, a problem if it repeats until a timeout.",
    why="Repeated for minutes, it means the ranks will not meet.",
    fix="If the job then fails, check MASTER_ADDR/PORT and the firewall.",
    severity=Severity.WARNING, docs_url=RUN_DOCS)
UNUSED = declare(
    "LOG055", Category.DDP_USAGE_ERROR, "DDP: parameters that do not get gradients",
    what="Some model parameters were not used to compute the loss in an iteration (a branch, "
         "a frozen head, an auxiliary output), or a parameter was marked ready twice "
         "(reentrant checkpointing, shared modules).",
    why="DDP waits for their gradients; the second iteration raises this error.",
    fix="Pass find_unused_parameters=True to DistributedDataParallel, or make every "
        "parameter take part in the loss (or freeze it with requires_grad=False).",
    docs_url=DDP_NOTES)
NO_GROUP = declare(
    "LOG056", Category.DDP_USAGE_ERROR, "DDP/SyncBatchNorm used without a process group",
    what="Distributed code ran in a process that never called init_process_group - usually "
         "a single-GPU or `python train.py` run of a script with SyncBatchNorm or DDP, or a "
         "script launched without torchrun so MASTER_ADDR/RANK are unset.",
    why="The first collective or the DDP wrapper fails.",
    fix="Launch with torchrun, or use plain BatchNorm/no DDP for single-GPU runs.",
    docs_url=DDP_NOTES)
DEVICES = declare(
    "LOG057", Category.DDP_USAGE_ERROR, "DDP: ranks and devices do not line up",
    what="The script placed the model or tensors on the wrong GPU for its rank: two ranks on "
         "one GPU (torch.cuda.set_device not called), device_ids not matching the module's "
         "device, tensors on the CPU given to NCCL, or parts of the model on different GPUs.",
    why="DDP or NCCL refuse to start the first collective.",
    fix="In each rank call torch.cuda.set_device(local_rank), move the model and every batch "
        "there, and pass device_ids=[local_rank]; give NCCL only GPU tensors.",
    docs_url=DDP_NOTES)
BATCH = declare(
    "LOG058", Category.DDP_USAGE_ERROR, "Batch size does not fit the GPU count",
    what="YOLO (and other trainers) split the batch evenly across GPUs and require it to be "
         "a multiple of the GPU count; AutoBatch (batch=-1) is single-GPU only.",
    why="Training refuses to start.",
    fix="Choose a total batch size that is a multiple of the number of GPUs (e.g. 16 or 32 "
        "for 2 GPUs: Ultralytics batch=, YOLOv5 --batch-size), and an explicit one instead of "
        "AutoBatch.",
    docs_url="https://docs.ultralytics.com/modes/train/#multi-gpu-training")
FORKED_CUDA = declare(
    "LOG059", Category.DDP_USAGE_ERROR, "CUDA used in a forked subprocess",
    what="A process created with fork (a DataLoader worker, multiprocessing.Process) touched "
         "CUDA after the parent had initialised it.",
    why="CUDA cannot be re-initialised in a forked child; the worker fails.",
    fix="Use the 'spawn' start method (torch.multiprocessing.set_start_method('spawn')), or "
        "keep CUDA out of dataset code and workers.",
    docs_url="https://pytorch.org/docs/stable/notes/multiprocessing.html"
             "#cuda-in-multiprocessing")
UNUSED_PERF = declare(
    "LOG060", Category.DDP_USAGE_ERROR, "find_unused_parameters=True but none were unused",
    what="DDP searched the graph for unused parameters every iteration and found none.",
    why="Only a slowdown: an extra traversal of the autograd graph per step.",
    fix="Drop find_unused_parameters=True.",
    severity=Severity.WARNING, docs_url=DDP_NOTES)
# torch's Gloo backend binds to the address this host's name resolves to; when that is no
# local address it binds to 127.0.0.1 and says so (ProcessGroupGloo.cpp,
# createDefaultDevice: "Unable to resolve hostname to a (local) address. Using the loopback
# address as fallback. Manually set the network interface to bind to with
# GLOO_SOCKET_IFNAME."). Alone it is harmless on one machine, hence a warning; across nodes
# the other ranks are told to connect to 127.0.0.1, their own loopback, and are refused or
# time out (aws-samples/aws-do-eks#50). diagnose/context.py reads a failed connection next
# to it as this finding.
GLOO_LOOPBACK = declare(
    "LOG082", Category.NCCL_NETWORK,
    "Gloo fell back to the loopback address (the host name resolves to no routable address)",
    what="torch's Gloo backend could not resolve this host's name to a local address and "
         "bound to 127.0.0.1. The other ranks are given that address for this rank: across "
         "nodes they connect to their own loopback instead, and the connection is refused or "
         "times out. Common with many interfaces (Kubernetes hostNetwork, docker, EFA) or a "
         "host name missing from /etc/hosts.",
    why="A multi-node job cannot form its Gloo group (and whatever uses it: the CPU "
        "collectives, some launchers' own setup); one machine alone is unaffected.",
    fix="Set GLOO_SOCKET_IFNAME to a concrete routable interface on every node (Gloo does "
        "not accept NCCL's ^exclusion syntax) and NCCL_SOCKET_IFNAME likewise, or make the "
        "host name resolve to that interface's address.",
    severity=Severity.WARNING,
    docs_url="https://pytorch.org/docs/stable/distributed.html#common-environment-variables")
# torch 2.4 made libuv the TCPStore server's default backend (torch/distributed/
# rendezvous.py reads use_libuv from the init_method URL or the USE_LIBUV variable, default
# on), but a build without libuv - the native Windows wheels of that time - cannot start it,
# and TCPStore's constructor refuses: "use_libuv was requested but PyTorch was build without
# libuv support" (https://pytorch.org/tutorials/intermediate/TCPStore_libuv_backend.html;
# jingyaogong/minimind#115: torchrun on Windows 11, ran once moved to WSL2).
NO_LIBUV = declare(
    "LOG084", Category.RENDEZVOUS_FAILURE,
    "The rendezvous store asked for libuv, which this PyTorch build lacks",
    what="torch's TCPStore, the store the ranks meet at, was asked for its libuv server "
         "backend (the default since torch 2.4, also for torchrun), but this torch was built "
         "without libuv: the native Windows wheels. The store is never created.",
    why="No rank can rendezvous, so the job fails before training starts.",
    fix="Run multi-GPU training under WSL2 or Linux; on native Windows turn libuv off: "
        "USE_LIBUV=0 in the environment, init_method='env://?use_libuv=False', or "
        "TCPStore(..., use_libuv=False).",
    docs_url="https://pytorch.org/tutorials/intermediate/TCPStore_libuv_backend.html")
# Until every rank has joined, init_process_group waits: torch's store-based barrier logs
# "Waiting in store based barrier to initialize process group for rank: 0, key:
# store_based_barrier_key:1 (world_size=2, worker_count=1, timeout=0:30:00)" every few
# seconds (torch/distributed/distributed_c10d.py _store_based_barrier), and a job whose log
# ends where the ranks enter init_process_group (diagnose/last_lines.py: DeepSpeed's
# init_distributed, which calls nothing else) is waiting there too. The ranks never met -
# a wrong or unusable MASTER_ADDR/PORT (RLHFlow/Online-RLHF#11: main_process_port 0 in the
# accelerate config), a rank that never started, or a world size larger than the ranks.
RDZV_WAITING = declare(
    "LOG087", Category.RENDEZVOUS_FAILURE,
    "The ranks are still waiting for each other in init_process_group",
    what="At least one rank entered init_process_group and is waiting for the others to "
         "join the rendezvous store: they connect to another address or port (a "
         "MASTER_PORT of 0 or one that differs between ranks, a wrong MASTER_ADDR), never "
         "started, or fewer ranks run than the world size says. Harmless for a few seconds "
         "while ranks start; a log that ends here is a job that hangs at start-up.",
    why="Training never starts; after the timeout (30 minutes by default) init fails.",
    fix="Give every rank the same reachable MASTER_ADDR and a real free MASTER_PORT (not 0; "
        "accelerate: main_process_port), and make the number of ranks started equal the "
        "world size.",
    severity=Severity.WARNING, docs_url=RUN_DOCS)

RULES: tuple[Rule, ...] = (
    Rule(PORT_IN_USE, rx(r"error[^\n]*address already in use", r"fail[^\n]*address already in use",
                         r"error\b[^\n]*eaddrinuse", r"error: 10048\b",
                         # accelerate's own check of main_process_port before it launches
                         # (accelerate/utils/launch.py prepare_multi_gpu_env)
                         r"error: tried to launch distributed communication on port \S+,? but "
                         r"another process is utilizing it"),
         ("error", "fail"),
         (Step("Find the process that holds the port.", command="ss -ltnp"),
          # torchrun --standalone rendezvous on localhost port 0, so the OS picks a free
          # one (https://pytorch.org/docs/stable/elastic/run.html, "Single-node
          # multi-worker"); across nodes every node must be given the same free port.
          Step("On one node, let torchrun choose a free port.",
               command="torchrun --standalone --nproc-per-node=gpu train.py"),
          Step("Across nodes, ask the OS for a free port on the rank-0 node and give that same "
               "port to every node.",
               command="python -c \"import socket; s = socket.socket(); s.bind(('', 0)); "
                       "print(s.getsockname()[1])\"")),
         examples=("RuntimeError: The server socket has failed to listen on any local network "
                   "address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: "
                   "address already in use",
                   "[W socket.cpp:426] [c10d] The server socket has failed to listen on "
                   "[::]:29500 (errno: 98 - Address already in use).",
                   "ConnectionError: Tried to launch distributed communication on port `29500`, "
                   "but another process is utilizing it. Please specify a different port (such "
                   "as using the `--main_process_port` flag or specifying a different "
                   "`main_process_port` in your config file) and rerun your script."),
         # EADDRINUSE's string pasted alone, or the rendezvous port taken said in words
         # ("master_port is already used", ViTAE-Transformer/ViTDet#16), where nothing else was
         # read; not another server's port it then moves off (Jupyter's "The port 8888 is
         # already in use, trying another port", Gradio's "launching on 7861")
         bare_message=re.compile(
             r"(?:\baddress already in use\b"
             r"|(?<![a-z])(?:master|main_process|rdzv|rendezvous|dist)[_ ]?port\b[^\n]{0,20}?"
             r"\balready\s+(?:in\s+use|used|taken|occupied|bound)\b"
             r"|\bport\s+\d+\s+is\s+already\s+in\s+use\b)"
             r"(?![^\n]*\b(?:trying|launching|instead|another port|fall(?:ing)?\s+back))",
             re.IGNORECASE)),
    Rule(NO_LIBUV, rx(r"error\W[^\n]*use_libuv was requested but pytorch was buil[dt] "
                      r"without libuv"),
         ("error",),
         (Step("Turn the libuv store backend off for this run (native Windows).",
               command="set USE_LIBUV=0 && torchrun --nproc_per_node 2 train.py"),
          Step("Or pass it in the script's init_method: "
               "dist.init_process_group('gloo', init_method='env://?use_libuv=False')."),
          Step("Better, train under WSL2 or Linux, where torch ships with libuv and NCCL.",
               command="wsl --install")),
         examples=("RuntimeError: use_libuv was requested but PyTorch was build without libuv "
                   "support",
                   # pytest's report of the same, from a library's Windows CI
                   "E       RuntimeError: use_libuv was requested but PyTorch was build without "
                   "libuv support"),
         bare_message=re.compile(r"\buse_libuv was requested but pytorch was buil[dt] "
                                 r"without libuv", re.IGNORECASE)),
    Rule(RDZV_TIMEOUT, rx(r"client socket has timed out after",
                          r"rendezvoustimeouterror",
                          r"rendezvousconnectionerror",
                          r"timed out after \d+ seconds waiting for clients",
                          r"timed out initializing process group in store based barrier",
                          r"connect\(\) timed out",
                          # (neither is the NCCL id wait: the store answered there, the
                          # first rank never published its id, nccl.py LOG086)
                          r"^(?![^\n]*nccluniqueid)[^\n]*error:[^\n]*socket timeout",
                          r"^(?![^\n]*nccluniqueid)[^\n]*store->get\([^)]*\) got error",
                          r"valueerror: host not found",
                          r"error[^\n]*(?:rendezvous|c10d|store|tcpstore)[^\n]*"
                          r"(?:name or service not known|failure in name resolution|gai error)"),
         ("time", "error"),
         (REACH, Step("Check that every node uses the same MASTER_ADDR/PORT and world size.",
                      command="env | grep -E 'MASTER_|WORLD_SIZE|RANK'")),
         examples=(
             "torch.distributed.DistNetworkError: The client socket has timed out after 1800s "
             "while trying to connect to (10.0.0.1, 29500).",
             "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
             "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for "
             "clients. 1/2 clients joined.",
             "RuntimeError: Timed out initializing process group in store based barrier on rank: "
             "3, for key: store_based_barrier_key:1 (world_size=4, worker_count=2, "
             "timeout=0:30:00)",
             "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The "
             "connection to the C10d store has failed. See inner exception for details.",
             "ValueError: host not found: Temporary failure in name resolution",
             "torch.distributed.DistNetworkError: The client socket has failed to connect to "
             "the TCPStore: Name or service not known (gai error: -2)"),
         symptom_of=(ANY_ERROR,),
         alternatives=("nccl_network: when NCCL bootstrap, not the store, is what times out",),
         decide=(REACH,)),
    # torch/distributed/elastic/rendezvous/api.py (v2.5.1) names the other ways a rendezvous
    # ends: closed (dynamic_rendezvous.py raises RendezvousClosedError once an agent marked
    # it closed: a node's agent shut down after a failure, or a node joined under an
    # --rdzv-id whose job had already ended) and a state the backend could not read
    # (RendezvousStateError). Either follows the failure that closed it where the log has it.
    Rule(RDZV_TIMEOUT, rx(r"rendezvousclosederror", r"rendezvousstateerror"),
         ("error",),
         (Step("Find the node whose agent closed the rendezvous: its own error is the cause; "
               "read every node's log."),
          Step("Start every node of a new attempt with a new rendezvous id (and the same "
               "endpoint and node count).",
               command="torchrun --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "
                       "$MASTER_ADDR:29400 --rdzv-id $(date +%s) train.py"),
          REACH),
         examples=("torch.distributed.elastic.rendezvous.api.RendezvousClosedError",
                   "torch.distributed.elastic.rendezvous.api.RendezvousStateError: The "
                   "rendezvous state is corrupt."),
         symptom_of=(ANY_ERROR,)),
    Rule(RDZV_WAITING, rx(r"waiting in store based barrier to initialize process group"
                          r"[^\n]*timeout"),
         ("time",),
         (Step("Check that every rank is given the same address, a real port and the world "
               "size.", command="env | grep -E 'MASTER_|WORLD_SIZE|RANK'"),
          Step("For accelerate, look for a port of 0 or a world size that does not match.",
               command="grep -nE 'main_process_port|num_processes|num_machines' "
                       "~/.cache/huggingface/accelerate/default_config.yaml"),
          REACH),
         examples=("INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to "
                   "initialize process group for rank: 0, key: store_based_barrier_key:1 "
                   "(world_size=2, worker_count=1, timeout=0:30:00)",),
         alternatives=("host_out_of_memory: a rank killed at start-up (exit code -9) never "
                       "joins the others",),
         decide=(REACH,)),
    Rule(RDZV_RETRY, rx(r"client socket has failed to connect"),
         ("fail",), (REACH,),
         examples=("[W socket.cpp:601] [c10d] The client socket has failed to connect to "
                   "[node1]:29500 (errno: 111 - Connection refused).",
                   "[W socket.cpp:663] [c10d] The client socket has failed to connect to "
                   "[10.0.0.1]:29500 (errno: 113 - No route to host)."),
         symptom_of=(ANY_ERROR,)),
    Rule(RDZV_REFUSED, rx(r"^(?!.*(?:nccl|client socket has failed|connectionpool|urllib"
                          r"|https?:))[^\n]*connection refused"),
         ("refused",),
         (REACH, Step("Give nodes a reachable MASTER_ADDR (an IP, not localhost).")),
         examples=("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
                   "[127.0.1.1]:31863: Connection refused",
                   "ConnectionRefusedError: [Errno 111] Connection refused"),
         symptom_of=(ANY_ERROR,),
         alternatives=("nccl_network: inside NCCL the same refusal means a wrong interface",),
         decide=(REACH,),
         relations=(
             ReadAs("dataloader-handoff", code="LOG040",
                    reason="Refused inside torch.multiprocessing's rebuild_storage_fd, the "
                           "connection is a DataLoader worker handing a batch's shared-memory "
                           "file descriptor to the main process over a local socket "
                           "(torch/multiprocessing/reductions.py), not the rendezvous: it "
                           "fails when /dev/shm or the open-file limit runs out "
                           "(SunnyCat2013's write-up: /dev/shm was 64M)."),)),
    Rule(GLOO_LOOPBACK, rx(r"warn[^\n]*unable to resolve hostname to a \(local\) address"),
         ("warn",),
         (Step("See what this host's name resolves to (127.x here means the fallback).",
               command="getent hosts $(hostname)"),
          Step("List the interfaces and pick the one the nodes share.", command="ip -br addr"),
          Step("Name it for Gloo and NCCL on every node (a concrete name for Gloo).",
               command="GLOO_SOCKET_IFNAME=eth0 NCCL_SOCKET_IFNAME=eth0 torchrun ...")),
         examples=("[W ProcessGroupGloo.cpp:694] Warning: Unable to resolve hostname to a "
                   "(local) address. Using the loopback address as fallback. Manually set the "
                   "network interface to bind to with GLOO_SOCKET_IFNAME. (function operator())",
                   "[rank8] Warning: Unable to resolve hostname to a (local) address. Using the "
                   "loopback"),
         relations=(Explains(("LOG049", "LOG052", "LOG053", "LOG054"),
                             reason="Gloo bound this host to 127.0.0.1, so the other ranks "
                                    "were given the loopback address: a connection between "
                                    "ranks that is refused, times out or closes is that "
                                    "address, not the rendezvous or a dead peer "
                                    "(aws-samples/aws-do-eks#50)."),)),
    Rule(UNUSED, rx(r"error: expected to have finished reduction in the prior iteration",
                    r"this error indicates that your module has parameters that were not used",
                    r"error: expected to mark a variable ready only once"),
         ("error",),
         (Step("List the parameters that got no gradient.",
               command="TORCH_DISTRIBUTED_DEBUG=DETAIL torchrun ..."),
          Step("Or let DDP tolerate them: in the training script, build the wrapper as "
               "DistributedDataParallel(model, device_ids=[local_rank], "
               "find_unused_parameters=True) (slower).")),
         examples=("RuntimeError: Expected to have finished reduction in the prior iteration "
                   "before starting a new one. This error indicates that your module has "
                   "parameters that were not used in producing loss.",
                   "RuntimeError: Expected to mark a variable ready only once.")),
    # torch >= 1.8 says "has not been initialized", older releases "is not initialized"
    # (torch/distributed/distributed_c10d.py _check_default_pg)
    Rule(NO_GROUP, rx(r"error: default process group (?:has not been|is not) initialized",
                      r"error: syncbatchnorm (?:is only supported|expected input tensor)",
                      r"error initializing torch\.distributed using env:// rendezvous: "
                      r"environment variable \w+ expected",
                      # the same check's raise line, where a paste ends before the message
                      # (torch/distributed/rendezvous.py _env_rendezvous_handler;
                      # hzwer/ECCV2022-RIFE#52: plain `python train.py`)
                      r"raise _env_error\(\W(?:master_addr|master_port|rank|world_size)\W\)"),
         ("error",),
         (Step("Launch with torchrun so the process group is set up.",
               command="torchrun --nproc_per_node=2 train.py"),),
         examples=(
             "RuntimeError: Default process group has not been initialized, please make sure to "
             "call init_process_group.",
             "AssertionError: Default process group is not initialized",
             "AttributeError: SyncBatchNorm is only supported within torch.nn.parallel."
             "DistributedDataParallel",
             "ValueError: SyncBatchNorm expected input tensor to be on GPU",
             "ValueError: Error initializing torch.distributed using env:// rendezvous: "
             "environment variable MASTER_ADDR expected, but not set",
             '    raise _env_error("MASTER_ADDR")')),
    Rule(DEVICES, rx(r"error: module must have its parameters and buffers on device",
                     r"duplicate gpu detected : rank \d+ and rank \d+ both on cuda device",
                     r"error: distributeddataparallel device_ids and output_device arguments",
                     r"error: tensors must be cuda and dense",
                     r"error: expected all tensors to be on the same device"),
         ("error", "cud"),
         (Step("In the training script, bind each rank to its own GPU before building the "
               "model: local_rank = int(os.environ['LOCAL_RANK']); "
               "torch.cuda.set_device(local_rank); model.to(local_rank); "
               "DistributedDataParallel(model, device_ids=[local_rank])."),
          Step("Move each batch with .to(local_rank): a bare .cuda() or 'cuda:0' puts every "
               "rank's tensors on GPU 0.")),
         examples=(
             "RuntimeError: module must have its parameters and buffers on device cuda:0 "
             "(device_ids[0]) but found one of them on device: cuda:1",
             "NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000",
             "RuntimeError: Tensors must be CUDA and dense",
             "RuntimeError: Expected all tensors to be on the same device, but found at least "
             "two devices, cuda:0 and cuda:1!")),
    Rule(BATCH, rx(r"error: batch-size \d+ not multiple of gpu count",
                   # a GPU count (num_gpus, n_gpu), not a per-GPU size
                   # ("micro_batch_size_per_gpu": verl's own check, LOG126)
                   r"error: [^\n]*batch[^\n]*(?:multiple of|divisible by)[^\n]*"
                   r"(?<!per_)(?:gpus?|devices)",
                   r"error: autobatch with batch<1 not supported for multi-gpu",
                   # YOLOv5's train.py under DDP (ultralytics/yolov5 pull 6568)
                   r"error: --batch-size \d+ must be multiple of world_size",
                   r"error: autobatch with --batch-size -1 is not compatible with \w+ "
                   r"multi-gpu ddp",
                   r"assertionerror: assert [^\n]*batch\w*\s*%\s*(?:len\(|\w*(?:gpu|device|world"
                   r"|nproc|rank))"),
         ("error",),
         (Step("Make the total batch size a multiple of the number of GPUs (each GPU gets "
               "the total divided by the GPU count).", command="nvidia-smi -L | wc -l"),),
         examples=("AssertionError: batch-size 15 not multiple of GPU count 2",
                   "AssertionError: 'batch=15' must be a multiple of GPU count 2. Try 'batch=14' "
                   "or 'batch=16', the nearest batch sizes evenly divisible by 2.",
                   "ValueError: AutoBatch with batch<1 not supported for Multi-GPU training, "
                   "please specify a valid batch size, i.e. batch=16.",
                   "AssertionError: assert args.batch_size % len(devices) == 0",
                   "AssertionError: --batch-size 30 must be multiple of WORLD_SIZE",
                   "AssertionError: AutoBatch with --batch-size -1 is not compatible with YOLOv5 "
                   "Multi-GPU DDP training, please pass a valid --batch-size")),
    Rule(FORKED_CUDA, rx(r"cannot re-initialize cuda in forked subprocess"),
         ("cud",),
         (Step("In the training script, before any CUDA call or DataLoader, use the spawn "
               "start method: torch.multiprocessing.set_start_method('spawn', force=True) "
               "(DataLoader: multiprocessing_context='spawn')."),),
         examples=("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA "
                   "with multiprocessing, you must use the 'spawn' start method",)),
    Rule(UNUSED_PERF, rx(r"warning: find_unused_parameters=true was specified in ddp "
                         r"constructor, but did not find any unused parameters"),
         ("warn",),
         examples=("[W reducer.cpp:1300] Warning: find_unused_parameters=True was specified in "
                   "DDP constructor, but did not find any unused parameters in the forward "
                   "pass. This flag results in an extra traversal of the autograd graph every "
                   "iteration, which can adversely affect performance.",)),
)
