import torch
x = torch.randn(64, 512, device="cuda", requires_grad=True)
w = torch.randn(256, 512, device="cuda", requires_grad=True)
dy = torch.randn(64, 256, device="cuda")
step = lambda: torch.autograd.grad(torch.nn.functional.linear(x, w), (x, w), dy)
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    step()
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    out = step()
g.replay(); torch.cuda.synchronize(); print("torch autograd capture ok")
