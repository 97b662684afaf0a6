// GPU memory-test kernels for vramscope (`src/cuda/memtest.rs` loads the PTX made from this file).
//
// The PTX shipped in `assets/ptx/memtest.ptx` was produced on an NVIDIA H200 machine
// (nvcc 13.0) with:
//
//   nvcc -ptx -arch=compute_75 -o memtest.ptx kernels/memtest.cu
//   sed -i 's/^\.version .*/.version 6.3/' memtest.ptx      # oldest PTX ISA for these instructions
//   ptxas -arch=sm_75 memtest.ptx -o /dev/null && ptxas -arch=sm_90 memtest.ptx -o /dev/null
//
// Why compute_75 and `.version 6.3`: PTX is compiled by the driver (JIT) for whatever GPU it runs
// on, so one PTX file serves every GPU at or above its `.target`. compute_75 (Turing) is the
// oldest target that nvcc 13 still accepts. nvcc writes its own PTX ISA version (9.0 for CUDA 13.0)
// and a driver refuses PTX newer than it knows (CUDA_ERROR_UNSUPPORTED_PTX_VERSION), so the
// version line is lowered to 6.3 (CUDA 10.0, the first ISA that knows sm_75), which has every
// instruction these kernels use; ptxas checks that claim, because it rejects instructions the
// declared ISA lacks. Only the H200 (driver 580) has actually run this PTX.
//
// Layout: every kernel walks 64-bit words with a grid-stride loop (coalesced, so it runs near
// memory bandwidth). Buffers are passed as raw device addresses (u64) because the host allocates
// them with cuMemAlloc, not through cudarc's stream-ordered pool.
//
// Values per word (`mode`), with `gi` the word's index in the whole tested region:
//   0 constant      p
//   1 own address   the word's device address (catches address-line faults)
//   2 random        splitmix64(p ^ gi * golden ratio): stateless, so any thread order works
//   3 walking ones  1 << ((gi + aux) % 64)
//   4 modulo 20     p where gi % 20 == aux, ~p elsewhere
//
// Error records (`errs`): errs[0] = number of mismatches (atomic), then `err_capacity` records of
// four words each: device address, expected, actual, second read of the same address.

typedef unsigned long long u64;

#define MODE_CONSTANT 0u
#define MODE_OWN_ADDRESS 1u
#define MODE_RANDOM 2u
#define MODE_WALKING_ONES 3u
#define MODE_MODULO_20 4u

// check flags
#define EXPECT_COMPLEMENT 1u   // the word should hold ~value
#define WRITE_COMPLEMENT 2u    // after checking, write ~value (moving inversions)
#define ONLY_SELECTED 4u       // check only words with gi % 20 == aux (modulo-20 test)

__device__ __forceinline__ u64 splitmix64(u64 x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

__device__ __forceinline__ u64 word_value(unsigned mode, u64 address, u64 gi, u64 mod20, u64 p,
                                          u64 aux) {
    switch (mode) {
    case MODE_OWN_ADDRESS:
        return address;
    case MODE_RANDOM:
        return splitmix64(p ^ (gi * 0x9E3779B97F4A7C15ULL));
    case MODE_WALKING_ONES:
        return 1ULL << ((gi + aux) & 63ULL);
    case MODE_MODULO_20:
        return mod20 == aux ? p : ~p;
    default:
        return p;
    }
}

// Writes value(i) into each of the `n_words` words starting at device address `base`.
extern "C" __global__ void mt_fill(u64 base, u64 n_words, u64 first_index, u64 p, u64 aux,
                                   unsigned mode) {
    u64* buf = (u64*)base;
    u64 stride = (u64)blockDim.x * gridDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 mod20 = (first_index + i) % 20ULL;
    u64 stride_mod20 = stride % 20ULL;
    for (; i < n_words; i += stride) {
        buf[i] = word_value(mode, base + i * 8ULL, first_index + i, mod20, p, aux);
        mod20 += stride_mod20;
        if (mod20 >= 20ULL) mod20 -= 20ULL;
    }
}

// Reads every word, compares it with value(i) (or its complement), records mismatches and
// optionally writes the complement back.
//
// `plant_index` < n_words plants a fault for testing the tester: that word's value is XORed with
// `plant_mask` and stored back before the comparison, as a flipped memory bit would look.
// `plant_index` = ~0 disables it (the normal case).
extern "C" __global__ void mt_check(u64 base, u64 n_words, u64 first_index, u64 p, u64 aux,
                                    unsigned mode, unsigned flags, u64 errs, u64 err_capacity,
                                    u64 plant_index, u64 plant_mask) {
    u64* buf = (u64*)base;
    volatile u64* volatile_buf = buf;
    u64* records = (u64*)errs;
    u64 stride = (u64)blockDim.x * gridDim.x;
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 mod20 = (first_index + i) % 20ULL;
    u64 stride_mod20 = stride % 20ULL;
    for (; i < n_words; i += stride) {
        u64 this_mod20 = mod20;
        mod20 += stride_mod20;
        if (mod20 >= 20ULL) mod20 -= 20ULL;
        if ((flags & ONLY_SELECTED) && this_mod20 != aux) continue;

        u64 address = base + i * 8ULL;
        u64 value = word_value(mode, address, first_index + i, this_mod20, p, aux);
        u64 expected = (flags & EXPECT_COMPLEMENT) ? ~value : value;
        u64 actual = buf[i];
        if (i == plant_index) {
            actual ^= plant_mask;
            volatile_buf[i] = actual;
        }
        if (actual != expected) {
            u64 second_read = volatile_buf[i];
            u64 slot = atomicAdd(records, 1ULL);
            if (slot < err_capacity) {
                u64* record = records + 1 + slot * 4;
                record[0] = address;
                record[1] = expected;
                record[2] = actual;
                record[3] = second_read;
            }
        }
        if (flags & WRITE_COMPLEMENT) buf[i] = ~value;
    }
}
