//! cuBLAS for every GEMM: one handle per stream (a handle shared by concurrent streams
//! serialises them and may pick different algorithms), its workspace allocated by us and
//! charged to the ledger, and HF Linear `y[m,n] = x[m,k]·w[n,k]ᵀ` in cuBLAS's preferred
//! TN layout (executor.md §5).

use super::device::{cu, Dev};
use crate::backend::Arena;
use crate::ExecError;
use cudarc::cublas::{result as br, sys as bs, CudaBlas};
use cudarc::driver::{result, CudaStream};
use std::sync::Arc;

/// NVIDIA's recommended cuBLAS workspace on Hopper.
pub(super) const WORKSPACE_BYTES: usize = 32 << 20;

pub(crate) struct Blas {
    handle: CudaBlas,
    workspace: u64,
    stream: Arc<CudaStream>,
}

// SAFETY: the handle is used only under its stream's mutex (StreamRt::blas).
unsafe impl Send for Blas {}

fn blas_err(what: &'static str) -> impl FnOnce(br::CublasError) -> ExecError {
    move |e| ExecError::Cuda(format!("cuBLAS {what}: {e:?}"))
}

impl Blas {
    pub(super) fn new(dev: &Dev, stream: Arc<CudaStream>) -> Result<Self, ExecError> {
        dev.bind()?;
        let handle = CudaBlas::new(stream.clone()).map_err(blas_err("creating a handle"))?;
        // SAFETY: a fresh allocation on this context, synchronised before cuBLAS sees it;
        // freed in Drop on the same stream after the handle's work.
        let workspace = unsafe {
            let p = result::malloc_async(stream.cu_stream(), WORKSPACE_BYTES).map_err(cu("cuBLAS workspace"))?;
            stream.synchronize().map_err(cu("cuBLAS workspace"))?;
            bs::cublasSetWorkspace_v2(*handle.handle(), p as *mut _, WORKSPACE_BYTES)
                .result()
                .map_err(blas_err("cublasSetWorkspace"))?;
            p
        };
        dev.charge(Arena::Backend, WORKSPACE_BYTES as u64);
        Ok(Self { handle, workspace, stream })
    }

    /// `y = x · wᵀ` with f32 accumulation; `y` bf16 or (logits) f32. Pointers are device
    /// addresses of views already checked to hold m·k, n·k and m·n elements.
    pub(super) fn gemm(
        &self,
        x: u64,
        w: u64,
        y: u64,
        y_f32: bool,
        (m, n, k): (usize, usize, usize),
    ) -> Result<(), ExecError> {
        if m == 0 || n == 0 {
            return Ok(());
        }
        let dim = |v: usize| i32::try_from(v).map_err(|_| ExecError::Launch(format!("gemm dimension {v} exceeds i32")));
        let (mi, ni, ki) = (dim(m)?, dim(n)?, dim(k.max(1))?);
        let (alpha, beta) = (1.0f32, 0.0f32);
        let c_type = if y_f32 { bs::cudaDataType::CUDA_R_32F } else { bs::cudaDataType::CUDA_R_16BF };
        // Column-major view of row-major tensors: Yᵀ[n×m] = W[n×k] · Xᵀ[k×m], i.e.
        // op(A) = Wᵀ of the col-major k×n W, op(B) = the col-major k×m X.
        // SAFETY: the pointers address live device memory of the sizes above on this
        // handle's context; alpha and beta live across the (host pointer mode) call.
        unsafe {
            br::gemm_ex(
                *self.handle.handle(),
                bs::cublasOperation_t::CUBLAS_OP_T,
                bs::cublasOperation_t::CUBLAS_OP_N,
                ni,
                mi,
                dim(k)?,
                &alpha as *const f32 as *const _,
                w as *const _,
                bs::cudaDataType::CUDA_R_16BF,
                ki,
                x as *const _,
                bs::cudaDataType::CUDA_R_16BF,
                ki,
                &beta as *const f32 as *const _,
                y as *mut _,
                c_type,
                ni,
                bs::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                bs::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
            )
        }
        .map_err(blas_err("gemm"))
    }
}

impl Drop for Blas {
    fn drop(&mut self) {
        // SAFETY: the workspace was allocated on this stream; freeing it stream-ordered
        // after the handle's last GEMM there.
        unsafe {
            let _ = self.stream.context().bind_to_thread();
            let _ = result::free_async(self.workspace, self.stream.cu_stream());
        }
    }
}
