"""Process-wide speed switches set where a policy loads: cuDNN attention on CUDA, oneDNN linear layers on CPU."""
