"""zeep 4 (Debian's python3-zeep with python3-xmlsec), driven by test/soap/zeep.test.ts: signs a request
with one of zeep's two key-reference styles and SHA-256, after adding a wsu:Timestamp to the Security
header (the partners' recipe in docs/soap.md), and verifies the reply's signature against the
service's certificate.

Argument: one JSON object {wsdl, soap12, style: "Signature" | "BinarySignature", key, cert,
serviceCert, operation, params, mode: "call" | "message"}. Prints one JSON object: the result, the fault,
or the signed message ("message" mode builds it without sending it). Exit status 3: zeep or xmlsec missing.
"""
import datetime
import json
import sys

try:
    import xmlsec
    import zeep
    from zeep.exceptions import Fault, SignatureVerificationFailed
    from zeep.helpers import serialize_object
    from zeep.wsse.signature import BinarySignature, Signature, verify_envelope
    from zeep.wsse.utils import WSU, get_security_header
    from lxml import etree
except ImportError as error:
    print(json.dumps({"missing": str(error)}))
    sys.exit(3)


def recipe(style):
    """zeep's signature style, with a Timestamp signed beside the Body and the reply checked against the service."""

    class Partner(style):
        def __init__(self, key_file, cert_file, service_cert_file):
            super().__init__(key_file, cert_file,
                             signature_method=xmlsec.Transform.RSA_SHA256, digest_method=xmlsec.Transform.SHA256)
            self.service_cert_file = service_cert_file

        def apply(self, envelope, headers):
            # zeep signs the header's wsu:Timestamp when there is one: add it first.
            now = datetime.datetime.now(datetime.timezone.utc)
            stamp = lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
            get_security_header(envelope).append(WSU.Timestamp(
                WSU.Created(stamp(now)), WSU.Expires(stamp(now + datetime.timedelta(minutes=5)))))
            return super().apply(envelope, headers)

        def verify(self, envelope):
            # zeep's own verify() checks the reply with the partner's certificate: the service's is meant.
            verify_envelope(envelope, self.service_cert_file)
            return envelope

    return Partner


def main():
    args = json.loads(sys.argv[1])
    style = {"Signature": Signature, "BinarySignature": BinarySignature}[args["style"]]
    wsse = recipe(style)(args["key"], args["cert"], args["serviceCert"])
    client = zeep.Client(args["wsdl"], wsse=wsse)
    service_name = next(iter(client.wsdl.services))
    port = service_name + ("Soap12" if args["soap12"] else "Soap")
    service = client.bind(service_name, port)
    if args["mode"] == "message":
        message = client.create_message(service, args["operation"], **args["params"])
        print(json.dumps({"message": etree.tostring(message, encoding="unicode")}))
        return
    try:
        result = getattr(service, args["operation"])(**args["params"])
        print(json.dumps({"result": serialize_object(result, dict)}, default=str))
    except Fault as fault:
        detail = fault.detail
        code = detail.find(".//{*}code").text if detail is not None and detail.find(".//{*}code") is not None else None
        print(json.dumps({"fault": fault.message, "code": code}))
    except SignatureVerificationFailed:
        print(json.dumps({"signatureVerificationFailed": True}))


main()
