"""A TCP proxy on 127.0.0.1 that delays every chunk it forwards, in both directions, by half
of a round-trip time: a network between the consumer and a server (bench/store_scenarios.py
--pg-latency-ms). Order is kept per direction; throughput is not limited.

  proxy = DelayProxy(target_port, rtt_ms); proxy.start(); ... proxy.port ...; proxy.stop()
"""
import asyncio
import threading
import time


class DelayProxy:
    def __init__(self, target_port, rtt_ms):
        self.target_port = target_port
        self.delay = rtt_ms / 2000.0
        self.port = None
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("delay proxy did not start")

    def stop(self):
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self):
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, creader, cwriter):
        try:
            sreader, swriter = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(self._pipe(creader, swriter), self._pipe(sreader, cwriter),
                             return_exceptions=True)

    async def _pipe(self, reader, writer):
        queue = asyncio.Queue()

        async def send():
            while True:
                due, data = await queue.get()
                if data is None:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            writer.close()

        sender = asyncio.ensure_future(send())
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                queue.put_nowait((time.monotonic() + self.delay, data))
        finally:
            queue.put_nowait((0, None))
            await sender
