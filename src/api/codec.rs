//! The gRPC codec of shardcar's services: prost's encoding, with buffers that start small.
//!
//! tonic's default codec gives every stream an 8 KiB encode buffer that lives as long as
//! the stream. A sidecar holds one `Subscribe` stream per worker and its messages are a few
//! hundred bytes, so buffers start at 1 KiB and grow (and stay grown) only for a stream that
//! carries bigger messages. Nothing else changes: the bytes on the wire are prost's.
use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// Where each stream's encode and decode buffers start.
pub const START_BUFFER: usize = 1024;
/// How much an encoder gathers before it yields to the transport (tonic's default, 32 KiB).
const YIELD_THRESHOLD: usize = 32 * 1024;

fn settings() -> BufferSettings {
    BufferSettings::new(START_BUFFER, YIELD_THRESHOLD)
}

/// prost's codec with [`START_BUFFER`] buffers (the generated services name it).
#[derive(Debug, Clone, Copy)]
pub struct LeanCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for LeanCodec<T, U> {
    fn default() -> Self {
        LeanCodec(PhantomData)
    }
}

impl<T, U> Codec for LeanCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstCodec::<T, U>::raw_decoder(settings())
    }
}
