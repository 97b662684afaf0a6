"""An image-classification inference service (a ResNet-50 in bfloat16, channels-last) that
speeds itself up with CUDA graphs captured on the fly, one per input shape, kept in a dict.

Scenario: requests arrive as batches of 1 to 32 images at one of six resolutions (224 to 384
pixels, whatever the client sent), and the service runs them through a CUDA graph: the first
time a (batch, resolution) shape is seen it warms up and captures `torch.cuda.graph` for it
(each capture gets its own private memory pool, torch.cuda.graph's default) and stores the graph
with its static input and output in `self.graphs[shape]`; later requests of that shape replay it.

Mistake: the dict has no bound and the shapes are not bucketed: there are 192 possible shapes,
new ones keep arriving, and every graph keeps its private pool (the forward pass's working set for
that shape, up to ~0.5 GB for 32 images at 384 pixels) for as long as the graph lives. The
service's memory grows request after request, a leak of graph pools, until a capture fails.
`--bucket-shapes 1` pads each batch to 8, 16 or 32 images and each image to 384 pixels, so at
most three graphs are ever captured; `--max-graphs 16` keeps an LRU cache of graphs instead
(an evicted graph's pool is released).

Memory (bfloat16):
  parameters 25.6M x 2 B = 51 MB.
  one graph's pool: the capture's peak working set, e.g. 32 x 64 x 192^2 x 2 B = 151 MB (stem)
  + 32 x 256 x 96^2 x 2 B = 151 MB (first stage) + ... ~0.45 GB at 32 x 384^2; ~0.15 GB on
  average over the 192 shapes.
  cap_from (--bucket-shapes 1): three pools (8, 16 and 32 images at 384) ~0.8 GB + 0.1 GB:
  peak ~0.9 GB; the cap is 2.5 x that (~2.3 GB).
  own: ~40 distinct shapes in the first 150 requests, ~6 GB of pools: passes the cap after
  ~15-20 new shapes, around request 40-60: a leak that fails within the run.

    python3 graph_shape_cache_leak.py --cap-gib G [--bucket-shapes 0|1] [--max-graphs 0]
        [--max-batch 32] [--requests 300]
"""

import argparse
import collections
import random

import torch
import torch.nn.functional as F

from corpus_job import DEVICE, SMOKE_CPU, finish, parse_args

parser = argparse.ArgumentParser()
parser.add_argument("--bucket-shapes", type=int, default=0,
                    help="1: pad batches to 8/16/32 images and images to the largest resolution")
parser.add_argument("--max-graphs", type=int, default=0, help="keep at most this many graphs, LRU (0: all)")
parser.add_argument("--max-batch", type=int, default=32, help="largest request (images)")
parser.add_argument("--resolutions", default="224,256,288,320,352,384")
parser.add_argument("--requests", type=int, default=300)
parser.add_argument("--width-mult", type=float, default=1.0, help="ResNet width multiplier (tests)")
args = parse_args(parser)

torch.manual_seed(0)
rng = random.Random(0)
resolutions = [int(r) for r in args.resolutions.split(",")]


class Bottleneck(torch.nn.Module):
    def __init__(self, c_in, c_mid, stride):
        super().__init__()
        c_out = 4 * c_mid
        self.conv1 = torch.nn.Conv2d(c_in, c_mid, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c_mid)
        self.conv2 = torch.nn.Conv2d(c_mid, c_mid, 3, stride=stride, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c_mid)
        self.conv3 = torch.nn.Conv2d(c_mid, c_out, 1, bias=False)
        self.bn3 = torch.nn.BatchNorm2d(c_out)
        self.down = None
        if stride != 1 or c_in != c_out:
            self.down = torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False),
                                            torch.nn.BatchNorm2d(c_out))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return F.relu(h + (x if self.down is None else self.down(x)))


class ResNet50(torch.nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        w = lambda c: max(8, int(c * args.width_mult))  # noqa: E731
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, w(64), 7, stride=2, padding=3, bias=False),
                                        torch.nn.BatchNorm2d(w(64)), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1))
        layers, c_in = [], w(64)
        for c_mid, blocks, stride in [(w(64), 3, 1), (w(128), 4, 2), (w(256), 6, 2), (w(512), 3, 2)]:
            for i in range(blocks):
                layers.append(Bottleneck(c_in, c_mid, stride if i == 0 else 1))
                c_in = 4 * c_mid
        self.layers = torch.nn.Sequential(*layers)
        self.fc = torch.nn.Linear(c_in, classes)

    def forward(self, x):
        return self.fc(self.layers(self.stem(x)).mean(dim=(2, 3)))


class GraphedClassifier:
    """Runs the model through a CUDA graph per input shape, captured the first time it is seen."""

    def __init__(self, model, max_graphs):
        self.model = model
        self.max_graphs = max_graphs
        self.graphs = collections.OrderedDict()

    def capture(self, shape):
        static_in = torch.zeros(shape, device=DEVICE, dtype=torch.bfloat16).contiguous(
            memory_format=torch.channels_last)
        if SMOKE_CPU:  # CUDA graphs need a GPU: the CPU test runs the model eagerly
            return None, static_in, None
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.model(static_in)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_out = self.model(static_in)
        return graph, static_in, static_out

    @torch.no_grad()
    def __call__(self, images):
        shape = tuple(images.shape)
        if shape not in self.graphs:
            if self.max_graphs and len(self.graphs) >= self.max_graphs:
                self.graphs.popitem(last=False)  # the graph and its pool go with it
            self.graphs[shape] = self.capture(shape)
        self.graphs.move_to_end(shape)
        graph, static_in, static_out = self.graphs[shape]
        static_in.copy_(images)
        if graph is None:
            return self.model(static_in).clone()
        graph.replay()
        return static_out.clone()


model = ResNet50().to(DEVICE, memory_format=torch.channels_last).to(torch.bfloat16).eval()
service = GraphedClassifier(model, args.max_graphs)
print(f"ResNet-50 {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters; "
      f"{'bucketed' if args.bucket_shapes else 'per-shape'} graphs", flush=True)
# Clients favour a few request sizes and resolutions, but every size and resolution occurs.
batch_weights = [1.0 / (1 + abs(b - 8)) for b in range(1, args.max_batch + 1)]
served = 0
for request in range(args.requests):
    batch = rng.choices(range(1, args.max_batch + 1), weights=batch_weights)[0]
    size = rng.choice(resolutions)
    images = torch.randn(batch, 3, size, size, device=DEVICE).to(torch.bfloat16)
    if args.bucket_shapes:
        padded_batch = min(b for b in (8, 16, 32, args.max_batch) if b >= batch)
        images = F.pad(images, (0, max(resolutions) - size, 0, max(resolutions) - size))
        images = torch.cat([images, images.new_zeros(padded_batch - batch, *images.shape[1:])])
    images = images.contiguous(memory_format=torch.channels_last)
    predictions = service(images)[:batch].argmax(dim=1)
    served += predictions.numel()
    if request % 25 == 0:
        reserved = 0 if SMOKE_CPU else torch.cuda.memory_reserved() / 2**30
        print(f"request {request}: {batch} images at {size}px, {len(service.graphs)} graphs, "
              f"reserved {reserved:.2f} GiB", flush=True)
print(f"served {served} images", flush=True)
finish(args.requests)
