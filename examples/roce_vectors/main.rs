//! Test vectors for the RoCEv2 and CM codecs, for independent decoders (tshark, scapy):
//!
//!   roce_vectors write OUT.pcap    # one frame per opcode, NAK and CM message; writes
//!                                  # OUT.pcap.expect: "<frame> <tshark field>=<value> ..."
//!   roce_vectors check IN.pcap     # decodes every frame with the ICRC checked; prints
//!                                  # "<frame> ok <opcode> <CM attribute|->" or "<frame> error <why>"
//!
//!   roce_vectors seeds DIR         # fuzz seeds: DIR/roce_packet/*, DIR/cm_mad/*
//!
//! tests/wire/check_roce.py drives write and check. Addresses are 127.0.0.1 and 127.0.0.2; nothing is sent.

mod udp4;

use rdmashim::cm::wire::{self as cm, msgs, Cm, CmaHdr, Msg};
use rdmashim::provider::soft::roce::opcode::{self, op, Ext, Transport};
use rdmashim::provider::soft::roce::{self as roce, headers::*, Flow, Packet};
use rdmashim::runtime::pcap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::ExitCode;

const SRC: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const DST: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const SRC_PORT: u16 = 0xc0de;

fn flow() -> Flow {
    let s = SocketAddr::V4(SocketAddrV4::new(SRC, SRC_PORT));
    Flow::new(s, SocketAddr::V4(SocketAddrV4::new(DST, roce::ROCE_UDP_PORT))).expect("one family")
}

/// A packet of `code` with every header its opcode lists.
fn packet(code: u8, psn: u32, payload: &[u8]) -> Packet<'_> {
    let mut p = Packet::new(code, 0x00_0123, psn, payload);
    p.bth.set_ack_req(matches!(code & 0x1f, op::SEND_LAST | op::SEND_ONLY | op::WRITE_ONLY));
    for h in opcode::lookup(code).expect("opcode in the table").headers {
        match h {
            Ext::XrcEth => p.ext.xrc = Some(XrcEth::new(0x00_0789)),
            Ext::Deth => p.ext.deth = Some(Deth::new(0x1111_2222, 0x00_0456)),
            Ext::Reth => p.ext.reth = Some(Reth::new(0x7f12_3456_7000, 0x0000_1a2b, 3 * 1024 + 5)),
            Ext::AtomicEth => p.ext.atomic = Some(AtomicEth::new(0x7f12_3456_7008, 0x1a2b, 10, 20)),
            Ext::Aeth => p.ext.aeth = Some(Aeth::new(Syndrome::Ack { credits: 31 }, 17)),
            Ext::AtomicAckEth => p.ext.atomic_ack = Some(AtomicAckEth::new(0x1234_5678_9abc_def0)),
            Ext::ImmDt => p.ext.imm = Some(ImmDt::new(0xcafe_f00d)),
            Ext::Ieth => p.ext.ieth = Some(Ieth::new(0x0000_3c4d)),
        }
    }
    p
}

fn pd<const N: usize>(s: &[u8]) -> cm::Bytes<N> {
    cm::Bytes::from_slice(s).expect("fits")
}

/// Every CM message, as rdma_cm would fill it for a connection 127.0.0.1 -> 127.0.0.2:7471.
fn cm_messages() -> Vec<Msg> {
    let sid = cm::service_id(cm::port_space::TCP, 7471);
    let mut req = cm::Req {
        local_comm_id: 0x0bad_cafe,
        service_id: sid,
        local_ca_guid: 0x0200_00ff_fe00_0001,
        local_qpn: 0x00_0123,
        responder_resources: 16,
        initiator_depth: 16,
        remote_cm_response_timeout: 20,
        starting_psn: 0x00_1000,
        local_cm_response_timeout: 20,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: 3,
        rnr_retry_count: 7,
        max_cm_retries: 15,
        ..Default::default()
    };
    req.primary.local_lid = 0xffff;
    req.primary.remote_lid = 0xffff;
    req.primary.local_gid = cm::gid_from_ip(SRC.into());
    req.primary.remote_gid = cm::gid_from_ip(DST.into());
    req.primary.hop_limit = 64;
    req.primary.packet_rate = 3;
    req.primary.local_ack_timeout = 14;
    let hdr = CmaHdr { src_port: 40000, src: SRC.into(), dst: DST.into() };
    hdr.write(&mut req.private_data.0).expect("92 bytes hold 36");
    req.private_data.0[36..41].copy_from_slice(b"hello");
    let mut sidr = msgs::SidrReq {
        request_id: 7,
        pkey: 0xffff,
        service_id: cm::service_id(cm::port_space::UDP, 7174),
        ..Default::default()
    };
    hdr.write(&mut sidr.private_data.0).expect("216 bytes hold 36");
    // The same for an XRC initiator (transport service type 3, extended transport type 1).
    let xrc = cm::Req { transport: cm::ServiceType::Xrc, local_comm_id: 0x0bad_cafd, ..req };
    vec![
        Msg::Req(req),
        Msg::Req(xrc),
        Msg::Mra(msgs::Mra {
            local_comm_id: 2,
            remote_comm_id: 0x0bad_cafe,
            service_timeout: 20,
            ..Default::default()
        }),
        Msg::Rej(msgs::Rej {
            local_comm_id: 2,
            remote_comm_id: 0x0bad_cafe,
            reason: msgs::reason::CONSUMER_REJECT,
            private_data: pd(b"no"),
            ..Default::default()
        }),
        Msg::Rep(msgs::Rep {
            local_comm_id: 2,
            remote_comm_id: 0x0bad_cafe,
            local_qpn: 0x00_0456,
            starting_psn: 0x00_2000,
            responder_resources: 16,
            initiator_depth: 16,
            target_ack_delay: 15,
            rnr_retry_count: 7,
            local_ca_guid: 0x0200_00ff_fe00_0002,
            private_data: pd(b"welcome"),
            ..Default::default()
        }),
        Msg::Rtu(msgs::Rtu { local_comm_id: 0x0bad_cafe, remote_comm_id: 2, ..Default::default() }),
        Msg::Dreq(msgs::Dreq {
            local_comm_id: 0x0bad_cafe,
            remote_comm_id: 2,
            remote_qpn: 0x456,
            ..Default::default()
        }),
        Msg::Drep(msgs::Drep {
            local_comm_id: 2,
            remote_comm_id: 0x0bad_cafe,
            ..Default::default()
        }),
        Msg::SidrReq(sidr),
        Msg::SidrRep(msgs::SidrRep {
            request_id: 7,
            qpn: 0x789,
            service_id: sidr.service_id,
            qkey: 0x1234_5678,
            ..Default::default()
        }),
    ]
}

/// What tshark must read in a frame: `infiniband.<field>` = value (an integer, or hex bytes).
type Fields = Vec<(&'static str, String)>;

/// The fields of a packet as encoded, named as tshark's InfiniBand dissector names them.
fn packet_fields(p: &Packet<'_>) -> Fields {
    let mut f: Fields = vec![
        ("bth.opcode", p.bth.opcode().to_string()),
        ("bth.psn", p.bth.psn().to_string()),
        ("bth.destqp", p.bth.dest_qp().to_string()),
        // The encoder pads the payload to a multiple of 4.
        ("bth.padcnt", ((4 - p.payload.len() % 4) % 4).to_string()),
        ("bth.p_key", p.bth.pkey().to_string()),
        ("bth.a", u8::from(p.bth.ack_req()).to_string()),
    ];
    if let Some(h) = p.ext.xrc {
        f.push(("xrceth.xrcsrq", h.srqn().to_string()));
    }
    if let Some(h) = p.ext.reth {
        f.push(("reth.va", h.va().to_string()));
        f.push(("reth.r_key", h.rkey().to_string()));
        f.push(("reth.dmalen", h.len().to_string()));
    }
    if let Some(h) = p.ext.aeth {
        f.push(("aeth.syndrome", h.syndrome().to_byte().to_string()));
        f.push(("aeth.msn", h.msn().to_string()));
    }
    if let Some(h) = p.ext.deth {
        f.push(("deth.q_key", h.qkey().to_string()));
        f.push(("deth.srcqp", h.src_qp().to_string()));
    }
    if let Some(h) = p.ext.atomic {
        // tshark shows the AtomicETH's VA and R_Key under the RETH's field names.
        f.push(("reth.va", h.va().to_string()));
        f.push(("reth.r_key", h.rkey().to_string()));
        f.push(("atomiceth.swapdt", h.swap_add().to_string()));
        f.push(("atomiceth.cmpdt", h.compare().to_string()));
    }
    if let Some(h) = p.ext.atomic_ack {
        f.push(("atomicacketh.origremdt", h.orig().to_string()));
    }
    if let Some(h) = p.ext.imm {
        f.push(("immdt", format!("{:08x}", h.imm())));
    }
    if let Some(h) = p.ext.ieth {
        f.push(("ieth", format!("{:08x}", h.rkey())));
    }
    f
}

/// The REQ's (transport service type, extended transport type) of `t` (IBA 12.6.5, A14).
fn service_type(t: cm::ServiceType) -> (u8, u8) {
    match t {
        cm::ServiceType::Rc => (0, 0),
        cm::ServiceType::Uc => (1, 0),
        cm::ServiceType::Rd => (2, 0),
        cm::ServiceType::Xrc => (3, 1),
    }
}

/// The CM fields tshark's dissector shows (it has none for the bodies of MRA and SIDR).
fn cm_fields(cm: &Cm) -> Fields {
    let mut f: Fields = vec![
        ("mad.mgmtclass", "7".into()),
        ("mad.method", "3".into()),
        ("mad.attributeid", cm.msg.attr_id().to_string()),
        ("mad.transactionid", cm.tid.to_string()),
    ];
    match &cm.msg {
        Msg::Req(r) => {
            let ip = CmaHdr::read(r.private_data.as_slice()).expect("REQ vectors carry one");
            f.extend([
                ("cm.req.serviceid", r.service_id.to_string()),
                ("cm.req.localcaguid", r.local_ca_guid.to_string()),
                ("cm.req.localqpn", r.local_qpn.to_string()),
                ("cm.req.responderres", r.responder_resources.to_string()),
                ("cm.req.initdepth", r.initiator_depth.to_string()),
                ("cm.req.remoteresptout", r.remote_cm_response_timeout.to_string()),
                ("cm.req.startpsn", r.starting_psn.to_string()),
                ("cm.req.localresptout", r.local_cm_response_timeout.to_string()),
                ("cm.req.retrcount", r.retry_count.to_string()),
                ("cm.req.pkey", r.pkey.to_string()),
                ("cm.req.pppmtu", r.path_mtu.to_string()),
                ("cm.req.rnrretrcount", r.rnr_retry_count.to_string()),
                ("cm.req.maxcmretr", r.max_cm_retries.to_string()),
                ("cm.req.transpsvctype", service_type(r.transport).0.to_string()),
                ("cm.req.ext_transport", service_type(r.transport).1.to_string()),
                ("cm.req.prim_localgid_ipv4", cm::ip_from_gid(r.primary.local_gid).to_string()),
                ("cm.req.prim_remotegid_ipv4", cm::ip_from_gid(r.primary.remote_gid).to_string()),
                ("cm.req.prim_hoplim", r.primary.hop_limit.to_string()),
                ("cm.req.prim_localacktout", r.primary.local_ack_timeout.to_string()),
                ("cm.req.ip_cm.ipv", "4".into()),
                ("cm.req.ip_cm.sport", ip.src_port.to_string()),
                ("cm.req.ip_cm.sip4", ip.src.to_string()),
                ("cm.req.ip_cm.dip4", ip.dst.to_string()),
            ]);
        }
        Msg::Rep(r) => f.extend([
            ("cm.rep.remotecommid", r.remote_comm_id.to_string()),
            ("cm.rep.localqpn", r.local_qpn.to_string()),
            ("cm.rep.startpsn", r.starting_psn.to_string()),
            ("cm.rep.respres", r.responder_resources.to_string()),
            ("cm.rep.initdepth", r.initiator_depth.to_string()),
            ("cm.rep.tgtackdelay", r.target_ack_delay.to_string()),
            ("cm.rep.rnrretrcount", r.rnr_retry_count.to_string()),
            ("cm.rep.localcaguid", r.local_ca_guid.to_string()),
        ]),
        Msg::Rej(r) => f.extend([
            ("cm.rej.localcommid", r.local_comm_id.to_string()),
            ("cm.rej.remotecommid", r.remote_comm_id.to_string()),
            ("cm.rej.reason", r.reason.to_string()),
        ]),
        Msg::Rtu(r) => f.extend([
            ("cm.rtu.localcommid", r.local_comm_id.to_string()),
            ("cm.rtu.remotecommid", r.remote_comm_id.to_string()),
        ]),
        Msg::Dreq(r) => f.extend([
            ("cm.dreq.localcommid", r.local_comm_id.to_string()),
            ("cm.dreq.remotecommid", r.remote_comm_id.to_string()),
            ("cm.req.remoteqpneecn", r.remote_qpn.to_string()),
        ]),
        Msg::Drep(r) => f.extend([
            ("cm.drsp.localcommid", r.local_comm_id.to_string()),
            ("cm.drsp.remotecommid", r.remote_comm_id.to_string()),
        ]),
        Msg::Mra(_) | Msg::SidrReq(_) | Msg::SidrRep(_) => {}
    }
    f
}

/// (IB packet bytes, the fields tshark must decode) of every vector.
fn vectors() -> Vec<(Vec<u8>, Fields)> {
    let f = flow();
    let data: Vec<u8> = (0..=255u8).cycle().take(1024).collect();
    let mut descs: Vec<Packet<'_>> = Vec::new();
    let mut psn = 0x00_fffff0; // wraps past 2^24 on the way
    for row in &opcode::TABLE {
        let len = match (row.payload, row.code & 0x1f) {
            (false, _) => 0,
            (true, op::SEND_FIRST | op::SEND_MIDDLE | op::WRITE_FIRST | op::WRITE_MIDDLE) => 1024,
            (true, op::READ_RESPONSE_FIRST | op::READ_RESPONSE_MIDDLE) => 1024,
            (true, c) => 1 + usize::from(c) % 7, // every PadCnt appears
        };
        descs.push(packet(row.code, psn, &data[..len]));
        psn = (psn + 1) & 0xff_ffff;
    }
    let naks = [
        Syndrome::RnrNak { timer: 14 },
        Syndrome::Nak(NakCode::PsnSequenceError),
        Syndrome::Nak(NakCode::InvalidRequest),
        Syndrome::Nak(NakCode::RemoteAccessError),
        Syndrome::Nak(NakCode::RemoteOperationalError),
    ];
    for s in naks {
        let mut p = packet(op::ACK, 0x42, &[]);
        p.ext.aeth = Some(Aeth::new(s, 9));
        descs.push(p);
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 2048];
    for p in &descs {
        let n = roce::encode(p, &f, &mut buf).expect("vector encodes");
        let mut fields = packet_fields(p);
        if p.info().is_some_and(|i| i.transport == Transport::Xrc) {
            // Debian 12's tshark names the XRC opcodes but has no XRCETH dissector: it shows
            // what follows the BTH as opaque bytes, which must be the headers (XRCETH first),
            // the padded payload and the ICRC exactly as encoded.
            fields.retain(|(k, _)| k.starts_with("bth."));
            let body: String = buf[12..n].iter().map(|b| format!("{b:02x}")).collect();
            fields.push(("vendor", body));
        }
        out.push((buf[..n].to_vec(), fields));
    }
    for (i, m) in cm_messages().into_iter().enumerate() {
        let c = Cm { tid: 0x1000 + i as u64, msg: m };
        let mut mad = [0u8; cm::MAD_LEN];
        cm::encode(&c, &mut mad).expect("CM vector encodes");
        let mut p = Packet::new(op::UD | op::SEND_ONLY, roce::GSI_QPN, i as u32, &mad);
        p.ext.deth = Some(Deth::new(roce::GSI_QKEY, roce::GSI_QPN));
        let n = roce::encode(&p, &f, &mut buf).expect("MAD packet encodes");
        let mut fields = packet_fields(&p);
        fields.extend(cm_fields(&c));
        out.push((buf[..n].to_vec(), fields));
    }
    out
}

fn write(path: &str) -> Result<(), String> {
    let mut file = pcap::file_header();
    let mut expect = String::new();
    for (i, (ib, fields)) in vectors().iter().enumerate() {
        let (src, dst) =
            (SocketAddr::from((SRC, SRC_PORT)), SocketAddr::from((DST, roce::ROCE_UDP_PORT)));
        let frame = pcap::udp_frame(src, dst, 0, ib);
        pcap::record(&mut file, std::time::Duration::from_secs(i as u64), &frame);
        expect.push_str(&(i + 1).to_string());
        for (k, v) in fields {
            expect.push_str(&format!(" {k}={v}"));
        }
        expect.push('\n');
    }
    std::fs::write(path, file).map_err(|e| format!("{path}: {e}"))?;
    std::fs::write(format!("{path}.expect"), expect).map_err(|e| format!("{path}.expect: {e}"))
}

/// One frame as a receiver sees it: the flow from the headers, then the codecs.
fn check_frame(frame: &[u8]) -> Result<String, String> {
    let u = udp4::parse_udp4(frame)?;
    let mut f = Flow::new(SocketAddr::from(u.src), SocketAddr::from(u.dst)).ok_or("families")?;
    f.addrs = roce::FlowAddrs::V4 { src: u.src.0, dst: u.dst.0, id: u.id, df: u.df };
    let p = roce::decode(u.payload, &f).map_err(|e| format!("{e:?}"))?;
    let attr = if p.bth.dest_qp() == roce::GSI_QPN && p.ext.deth.is_some() {
        let m = cm::decode(p.payload).map_err(|e| format!("CM {e:?}"))?;
        format!("{:#06x}", m.msg.attr_id())
    } else {
        "-".into()
    };
    Ok(format!("{:#04x} {attr}", p.bth.opcode()))
}

fn check(path: &str) -> Result<(), String> {
    let file = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    for (i, frame) in pcap::frames(&file)?.into_iter().enumerate() {
        match check_frame(frame) {
            Ok(s) => println!("{} ok {s}", i + 1),
            Err(e) => println!("{} error {e}", i + 1),
        }
    }
    Ok(())
}

/// Seed inputs for the fuzz targets: every vector's UDP payload (fuzz/corpus/roce_packet, on
/// the flow the target uses) and every CM MAD (fuzz/corpus/cm_mad).
fn seeds(dir: &str) -> Result<(), String> {
    let roce_dir = format!("{dir}/roce_packet");
    let cm_dir = format!("{dir}/cm_mad");
    for d in [&roce_dir, &cm_dir] {
        std::fs::create_dir_all(d).map_err(|e| format!("{d}: {e}"))?;
    }
    for (i, (ib, fields)) in vectors().iter().enumerate() {
        let name = format!("{roce_dir}/vector-{:02}", i + 1);
        std::fs::write(&name, ib).map_err(|e| format!("{name}: {e}"))?;
        if fields.iter().any(|(k, _)| *k == "mad.attributeid") {
            let name = format!("{cm_dir}/mad-{:02}", i + 1);
            // The MAD is the payload: after BTH and DETH, before the ICRC.
            std::fs::write(&name, &ib[20..ib.len() - 4]).map_err(|e| format!("{name}: {e}"))?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let r = match args.get(1..).unwrap_or_default() {
        [cmd, path] if cmd == "write" => write(path),
        [cmd, path] if cmd == "check" => check(path),
        [cmd, dir] if cmd == "seeds" => seeds(dir),
        _ => Err("usage: roce_vectors write|check FILE.pcap | seeds DIR".into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("roce_vectors: {e}");
            ExitCode::FAILURE
        }
    }
}
